// Runs a simulated network on its own thread, as the TCP transport runs its io thread: a node
// posts to it and waits from the caller's thread. Each pass advances the virtual clock by `pass`,
// then sleeps 1 ms of real time.
#pragma once

#include <atomic>
#include <chrono>
#include <thread>

#include "net/memory/memory_transport.hpp"

namespace gt_test {

struct SimPump {
  SimPump(gossiptrain::net::SimNetwork& net, gossiptrain::net::Millis pass)
      : thread([this, &net, pass] {
          while (!stop.load()) {
            net.run_for(pass);
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
        }) {}
  ~SimPump() {
    stop = true;
    thread.join();
  }
  std::atomic<bool> stop{false};
  std::thread thread;
};

}  // namespace gt_test
