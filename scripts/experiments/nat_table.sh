#!/usr/bin/env bash
# Peers behind NAT (docs/nat.md, issue 32): the same six-peer run twice, side by side,
#   bridge: all six peers reachable on one bridge;
#   nat:    two reachable peers on the bridge, and two sites, each a router namespace masquerading
#           (nftables) for a private LAN of two peers that advertise their LAN addresses;
# then a table: exchanges per second, final test accuracy, exchanges by kind of pair.
# Needs root, iproute2, nftables. Everything it creates is named gtnat<pid>* and removed on exit.
#
#   scripts/experiments/nat_table.sh [BUILD_DIR] [-- extra gossip-peer flags]
#   GT_NAT_EPOCHS=6 GT_NAT_DATA=/usr/share/datasets/fashion-mnist scripts/experiments/nat_table.sh build
set -euo pipefail
build=${1:-build}
shift || true
[[ ${1:-} == -- ]] && shift
extra=("$@")
peer=$(realpath "$build/apps/gossip-peer")
epochs=${GT_NAT_EPOCHS:-6}
data=${GT_NAT_DATA:-/usr/share/datasets/fashion-mnist}
[[ -d $data ]] || data=synthetic
tag=gtnat$$
out=$(mktemp -d /tmp/${tag}.XXXX)
nss=()

cleanup() {
  for p in $(jobs -p); do kill -9 "$p" 2>/dev/null || true; done
  for ((i = ${#nss[@]} - 1; i >= 0; i--)); do ip netns del "${nss[i]}" 2>/dev/null || true; done
}
trap cleanup EXIT

addns() { ip netns add "$1"; nss+=("$1"); ip -n "$1" link set lo up; }
# wire HOST IFNAME SWITCH PORT BRIDGE
wire() {
  ip -n "$1" link add "$2" type veth peer name "$4" netns "$3"
  ip -n "$3" link set "$4" master "$5" up
  ip -n "$1" link set "$2" up
}

cat >"$out/nat.nft" <<'EOF'
table ip nat {
  chain post {
    type nat hook postrouting priority 100;
    oifname "eth0" masquerade
  }
}
table ip filter {
  chain lanout {
    type filter hook forward priority 0; policy drop;
    ct state established,related accept
    iifname "lan" oifname "lan" accept
    iifname "lan" oifname "eth0" accept
  }
}
EOF

# topo MODE: creates the namespaces h0..h5 and sets ips[]
topo() {
  local mode=$1 inet=${tag}${mode}inet
  addns "$inet"
  ip -n "$inet" link add br0 type bridge
  ip -n "$inet" link set br0 up
  ips=()
  local npub=2
  [[ $mode == bridge ]] && npub=6
  for ((h = 0; h < npub; h++)); do
    addns "${tag}${mode}h$h"
    wire "${tag}${mode}h$h" eth0 "$inet" "p$h" br0
    ip -n "${tag}${mode}h$h" addr add "10.88.0.$((h + 1))/24" dev eth0
    ips+=("10.88.0.$((h + 1))")
  done
  [[ $mode == bridge ]] && return
  for s in 0 1; do
    local r=${tag}${mode}r$s net=10.88.$((s + 1)).
    addns "$r"
    wire "$r" eth0 "$inet" "r$s" br0
    ip -n "$r" addr add "10.88.0.$((101 + s))/24" dev eth0
    ip -n "$r" link add lan type bridge
    ip -n "$r" link set lan up
    ip -n "$r" addr add "${net}1/24" dev lan
    ip netns exec "$r" sysctl -qw net.ipv4.ip_forward=1
    ip netns exec "$r" nft -f "$out/nat.nft"
    for j in 0 1; do
      local h=$((2 + 2 * s + j))
      addns "${tag}${mode}h$h"
      wire "${tag}${mode}h$h" eth0 "$r" "l$j" lan
      ip -n "${tag}${mode}h$h" addr add "${net}$((j + 2))/24" dev eth0
      ip -n "${tag}${mode}h$h" route add default via "${net}1"
      ips+=("${net}$((j + 2))")
    done
  done
}

run() {
  local mode=$1
  topo "$mode"
  local dir=$out/$mode
  mkdir -p "$dir"
  head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/net.key"
  local t0=$(date +%s.%N)
  local pids=()
  for h in 0 1 2 3 4 5; do
    mkdir -p "$dir/p$h"
    cp "$dir/net.key" "$dir/p$h/"
    local seeds=()
    ((h > 0)) && seeds=(--seeds "${ips[0]}:7000")
    (cd "$dir/p$h" && exec ip netns exec "${tag}${mode}h$h" /usr/bin/time -f "%U %S %e" -o cpu.txt \
      "$peer" --listen 0.0.0.0:7000 --advertise "${ips[h]}:7000" "${seeds[@]}" \
      --network-key net.key --num-shards 6 --shard "$h" --data "$data" --epochs "$epochs" \
      --metrics m.jsonl --min-peers 6 --min-peers-timeout 60 "${extra[@]}" >log.txt 2>&1) &
    pids+=($!)
  done
  local rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  echo "$(date +%s.%N) - $t0" | bc >"$dir/wall.txt"
  [[ $rc == 0 ]] || echo "nat_table: a peer of the $mode run failed (logs in $dir)" >&2
  for n in "${nss[@]}"; do ip netns del "$n" 2>/dev/null || true; done
  nss=()
}

run bridge
run nat
echo "# load: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores; data $data; $epochs epochs; runs in $out"
/usr/bin/python3 - "$out" <<'EOF'
import json, sys, os
out = sys.argv[1]
def kind(i):
    return "public" if i < 2 else "site%d" % ((i - 2) // 2)
rows = {}
relay_info = {}
for mode in ("bridge", "nat"):
    d = os.path.join(out, mode)
    wall = float(open(os.path.join(d, "wall.txt")).read())
    ids, ok, acc, dead, pairs = {}, 0, [], 0, {}
    lines = {}
    for h in range(6):
        ls = [json.loads(l) for l in open(os.path.join(d, "p%d" % h, "m.jsonl")) if l.strip()]
        lines[h] = ls
        for j in ls:
            if j.get("peer") not in (None, "local"):
                ids[j["peer"]] = h
                break
    for h, ls in lines.items():
        for j in ls:
            e = j["event"]
            if e == "exchange" and j.get("ok"):
                ok += 1
                o = ids.get(j["partner"], -1)
                a, b = sorted([kind(h), kind(o)])
                k = a + "-" + b
                if mode == "bridge": k = "all"
                pairs[k] = pairs.get(k, 0) + 1
            elif e == "eval" and j.get("final"):
                acc.append(j["test_acc"])
            elif e == "member" and j.get("state") == "dead":
                dead += 1
    cpu = []
    for h in range(6):
        try:
            u, s, _ = open(os.path.join(d, "p%d" % h, "cpu.txt")).read().split()
            cpu.append(float(u) + float(s))
        except Exception:
            cpu.append(float("nan"))
    import re
    relayed = sent = 0.0
    for h in range(6):
        log = open(os.path.join(d, "p%d" % h, "log.txt"), errors="replace").read()
        for m_ in re.finditer(r"relayed \d+ connections, ([0-9.]+) MB, for others", log):
            relayed += float(m_.group(1))
        for m_ in re.finditer(r"exchanges: \d+ ok, \d+ failed, ([0-9.]+) MB sent", log):
            sent += float(m_.group(1))
    relay_info[mode] = (relayed, sent)
    rows[mode] = (ok / 2 / wall, sum(acc) / max(1, len(acc)), len(acc), dead, pairs, wall, cpu)
print("| peers | exchanges per second | accuracy (mean final test acc) | peers done | dead marks | wall s |")
print("|---|---|---|---|---|---|")
names = {"bridge": "all reachable, on the same bridge", "nat": "the NAT topology"}
for m, (x, a, n, dead, pairs, wall, cpu) in rows.items():
    print("| %s | %.2f | %.4f | %d/6 | %d | %.0f |" % (names[m], x, a, n, dead, wall))
for m, r in rows.items():
    print("%s: exchanges seen by each side, by pair: %s" % (m, json.dumps(r[4], sort_keys=True)))
    print("%s: CPU seconds per peer: %s" % (m, " ".join("%.1f" % c for c in r[6])))
print("accuracy difference (nat - bridge): %+.2f points" % (100 * (rows["nat"][1] - rows["bridge"][1])))
for m, (relayed, sent) in relay_info.items():
    print("%s: %.1f MB relayed, of %.1f MB of exchange payload sent by all peers (%.1f%%; the relay also carries membership and handshakes)" % (m, relayed, sent, 100 * relayed / sent if sent else 0))
for m in rows:
    cpu = rows[m][6]
    print("%s: CPU share of the two public peers (the relays in the nat run): %.1f%% of all peers' CPU" % (m, 100 * (cpu[0] + cpu[1]) / sum(cpu)))
EOF
