// The training thread's buffers of the averaging exchange, behind one interface with two paths:
//  - direct (a host-memory backend and an element-wise wire: fp32, fp16, bf16): our snapshot is
//    encoded straight into its chunk messages, and the mix reads it and the partner's vector from
//    their messages (fp16 and bf16 decoded a block at a time), so s, r and the encode buffers are
//    neither allocated nor copied (100 MB less of each per 100 MB exchange);
//  - copy (every other case, a GPU's among them): s and r live in device buffers, the partner's
//    chunks are uploaded (and decoded) as they arrive.
// The partner's messages go back to the transport's buffer pool through the recycle function
// once used, so the next exchange receives into pages already mapped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "gossip/exchange/chunk_set.hpp"
#include "gossip/exchange/wire_format.hpp"
#include "kernels/backend.hpp"

namespace gossiptrain::gossip {

// fn(first, r, s, n): the partner's values r and our snapshot's s, [first, first + n).
using FloatSpanFn =
    std::function<void(std::size_t first, const float* r, const float* s, std::size_t n)>;
// Gives one received message back to the transport's buffer pool.
using RecycleFn = std::function<void(net::Bytes&&)>;

class SnapshotBuffers {
 public:
  // direct: the caller checked that the backend's memory is host memory and the wire
  // element-wise. chunk_bytes: payload bytes per chunk (a multiple of 4).
  // error_feedback (copy path only): each snapshot sends the encoding of x + e and keeps
  // e = (x + e) - sent, the part the wire rounded off, for the next one (docs/communication.md).
  static std::unique_ptr<SnapshotBuffers> make(bool direct, WireFormat wire,
                                               std::size_t chunk_bytes, kernels::Backend& be,
                                               RecycleFn recycle, bool error_feedback = false);
  // Public for the subclasses' inherited constructors (the class itself is abstract).
  SnapshotBuffers(WireFormat wire, std::size_t chunk_bytes, kernels::Backend& be, RecycleFn recycle)
      : wire_(wire), chunk_bytes_(chunk_bytes), be_(be), recycle_(std::move(recycle)) {}
  virtual ~SnapshotBuffers() = default;

  // Sizes the buffers for n parameters (the first call; n never changes).
  virtual void allocate(std::size_t n) = 0;
  // Takes x (n values) straight into chunk messages: begun(own) before the first is filled,
  // filled(k) once chunks [0, k) hold their data, so streaming starts early. The last snapshot's
  // messages are reused when nobody else holds them. s is exactly what was sent (decoded), so
  // that an exchange conserves the sum of the two vectors with the lossy wires too.
  ChunkSetPtr snapshot(const float* x, std::size_t n,
                       const std::function<void(const ChunkSetPtr&)>& begun,
                       const std::function<void(std::size_t k)>& filled);
  // The partner's vector of exchange seq is received from now on (a new seq drops what a failed
  // exchange left).
  void switch_to(std::uint64_t seq);
  // Takes the partner's chunks that arrived since the last call (moved from).
  virtual void receive(ChunkList& chunks) = 0;
  // The whole vector has been received: completes its decoding. False when it does not decode
  // against our snapshot (int4-rel: the partner is further than its step allows).
  virtual bool finish() = 0;
  // The whole vector as float spans, with our snapshot's.
  virtual void for_each_float_span(const FloatSpanFn& fn) = 0;
  // Gives back the partner's messages kept for the mix (direct mode).
  virtual void release() {}
  // Error feedback's residual e (n values; empty without error feedback), and setting it (a
  // checkpoint's; n values).
  virtual std::vector<float> residual() const { return {}; }
  virtual void set_residual(const std::vector<float>&) {}
  // int4-rel (relative_wire.hpp): a decoded vector tells how far partners are; a failed decode
  // here widens the steps of the blocks that failed, a partner's every step. Nothing for the
  // other wires.
  virtual void observe() {}
  virtual void widen() {}
  virtual void widen_all() {}
  // ||r - s||^2 and ||s||^2, through the backend.
  double sq_diff();
  double own_sq_norm();
  // ||x||^2 of n values in the backend's memory (the parameters), through the backend.
  double sq_norm(const float* x, std::size_t n);

 protected:
  // Hooks of snapshot(): before the chunks, one chunk's data at byte offset off, after them.
  virtual void encode_begin(const float* x, std::size_t n) = 0;
  virtual void fill_chunk(std::uint8_t* dst, const float* x, std::size_t off, std::size_t len) = 0;
  virtual void encode_end(const float* x, std::size_t n) = 0;
  virtual void reset_received() = 0;
  // Counts bytes handed over; refuses more than the vector holds.
  void count_received(std::size_t len);
  // The backend's encoding of wire_ (every format but int4-rel, which is encoded on the host).
  kernels::Wire backend_encoding() const;

  static constexpr std::size_t kScratchValues = 16384;  // per decoded block: 64 KiB, in cache
  WireFormat wire_;
  std::size_t chunk_bytes_;
  kernels::Backend& be_;
  RecycleFn recycle_;
  std::size_t n_ = 0;
  ChunkSetPtr pool_;          // the last snapshot's chunks, reused when free
  std::size_t rx_bytes_ = 0;  // bytes of the partner's vector received

 private:
  ChunkSetPtr take_pool(std::size_t bytes);
  std::uint64_t rx_seq_ = 0;            // exchange whose vector is being received
  kernels::DeviceBuffer<float> zeros_;  // kScratchValues zeros, for sq_norm
};

// Protocol thread, fp32 (either path: our chunk messages hold exactly the floats we sent): adds ||r - s||^2 of the partner's chunk data r, bytes
// [offset, offset + size) of the vector, to sq; false (nothing added) when our snapshot has not
// been cut that far yet.
bool add_sq_diff(kernels::Backend& be, const ChunkSet* own, std::size_t chunk_bytes,
                 const std::uint8_t* r, std::size_t offset, std::size_t size, double& sq);
// ||s||^2 of our whole snapshot (protocol thread, fp32, every chunk cut); zeros is scratch. Both
// sum on the backend where its memory is host memory, else on this thread (kernels::host_sq_diff_norm).
double own_sq_norm(kernels::Backend& be, const ChunkSet& own, std::vector<float>& zeros);

}  // namespace gossiptrain::gossip
