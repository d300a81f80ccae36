#!/bin/bash
# The runtime on a real NVIDIA GPU node: one server and one agent on loopback, the agent's GPUs
# detected through NVML (nothing declared). Checks, and exits non-zero naming the first that
# fails:
#   1. the agent registers (before the fix of session 82 the server refused it: NVML names a
#      device `NVIDIA H200`, and a kind may not hold a space);
#   2. `hetsched nodes` lists every device of `nvidia-smi -L`, each of the kind the agent names
#      after its model (`h200`, `a100`, …: `detect::gpu_kind`); a GPU in MIG mode counts as its
#      instances (`MIG …` lines; kinds `h100-1g.10gb`, … : `mig`);
#   3. a job whose GPU variant asks for that kind runs on the devices: each task sees
#      CUDA_VISIBLE_DEVICES, PyTorch finds the device and multiplies bf16 matrices on it;
#      and each task's peak GPU memory (`usage.max_gpu_memory_bytes`) is at least its matrix's;
#   4. while it runs, the node's GPU utilisation (NVML, `/metrics`) rises above 0;
#   5. a job asking for a kind no node has is refused at submission, naming it;
#   6. (spec 01) a GPU task placed on a GPU-less agent of the same rack, an NNode, is offloaded to
#      this node's accelerator service (it is the rack's ANode) and runs on its device. The
#      NNode's agent runs in a mount namespace with NVML hidden, so that it detects no GPU (and
#      warns that the driver's NVML did not load); skipped where `unshare -m` is not allowed.
# It needs nvidia-smi and python3 with PyTorch (CUDA) on the machine; CI has no GPU and does not
# run it. Usage: scripts/gpu-check.sh [HETSCHED] (default target/release/hetsched).
set -u
B=$(realpath "${1:-target/release/hetsched}")
W=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$W"' EXIT
fail() { echo "FAIL: $*"; echo "-- agent log"; tail -n 20 "$W/agent.log"; exit 1; }
P=${PORT:-7640}
export HETSCHED_SERVER=http://127.0.0.1:$P HETSCHED_TOKEN_FILE=$W/data/token

nvidia-smi -L || fail "nvidia-smi found no GPU"
# Devices the agent offers: every MIG instance, and every GPU not in MIG mode.
DEVICES=$(( $(nvidia-smi -L | grep -c '^ *MIG ') + \
    $(nvidia-smi --query-gpu=mig.mode.current --format=csv,noheader | grep -vc '^Enabled') ))
"$B" server --data-dir "$W/data" --listen 127.0.0.1:$P --http-listen 127.0.0.1:$((P + 1)) \
    > "$W/server.log" 2>&1 &
for _ in $(seq 100); do [ -s "$W/data/address" ] && break; sleep 0.1; done
"$B" agent --server "http://127.0.0.1:$P" --token-file "$W/data/agent-token" --name gpu01 \
    --work-dir "$W/work" > "$W/agent.log" 2>&1 &
AGENT=$!
for _ in $(seq 50); do
    "$B" nodes --output json 2>/dev/null | grep -q '"alive": true' && break
    kill -0 $AGENT 2>/dev/null || fail "1. the agent exited: $(grep -i error "$W/agent.log" | tail -n 1)"
    sleep 0.2
done
echo "1. the agent registered"
grep "detect: GPU" "$W/agent.log"

NODES=$("$B" nodes --output json)
KIND=$(python3 -c 'import json,sys; n=json.load(sys.stdin)[0]; print(" ".join(a["kind"] for a in n["accelerators"]))' <<< "$NODES")
set -- $KIND
[ $# -eq "$DEVICES" ] || fail "2. nvidia-smi lists $DEVICES devices, hetsched nodes $# ($KIND)"
KIND=$1
echo "2. $# device(s) of kind $KIND"

cat > "$W/gpu-job.toml" <<EOF
[[application]]
name = "burn"
tasks = 2
[application.gpu]
gpus = 1
cores = 1
kind = "$KIND"
command = ["python3", "-c", """
import os, time, torch
print("CUDA_VISIBLE_DEVICES", os.environ["CUDA_VISIBLE_DEVICES"], "device", torch.cuda.get_device_name(0))
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()
start = time.time()
n = 0
while time.time() < start + 8:
    for _ in range(20):
        b = a @ a
    torch.cuda.synchronize()
    n += 20
print("bf16 TFLOP/s", round(n * 2 * 8192**3 / (time.time() - start) / 1e12))
"""]
EOF
"$B" submit "$W/gpu-job.toml" || fail "3. the GPU job of kind $KIND was refused"
PEAK=0
for _ in $(seq 40); do
    U=$(curl -s -H "Authorization: Bearer $(cat "$W/data/read-token")" "http://127.0.0.1:$((P + 1))/metrics" |
        awk '/^hetsched_node_gpu_utilisation_ratio/ {print $2}' | sort -g | tail -n 1)
    PEAK=$(python3 -c "print(max($PEAK, ${U:-0}))")
    "$B" job 1 --output json | grep -q '"state": "completed"' && break
    sleep 0.5
done
"$B" wait 1 --timeout 180s || fail "3. the GPU job did not complete"
for i in 0 1; do
    OUT=$("$B" log 1 "burn:$i")
    echo "   burn:$i: $OUT" | tr '\n' ' '; echo
    grep -Eq "CUDA_VISIBLE_DEVICES ([0-9]|MIG-|GPU-)" <<< "$OUT" || fail "3. burn:$i saw no CUDA_VISIBLE_DEVICES"
done
GPUMEM=$("$B" tasks --job 1 --output json | python3 -c 'import json,sys; print(" ".join(str(t["usage"]["max_gpu_memory_bytes"]) for t in json.load(sys.stdin)))')
for m in $GPUMEM; do
    [ "$m" -ge $((128 << 20)) ] || fail "3. a task's peak GPU memory is $m bytes, below its 128 MiB matrix ($GPUMEM)"
done
echo "3. the GPU job of kind $KIND completed on the device; peak GPU memory per task: $GPUMEM bytes"
python3 -c "import sys; sys.exit(0 if $PEAK > 0 else 1)" || fail "4. GPU utilisation stayed 0"
echo "4. GPU utilisation reached $PEAK while it ran"

cat > "$W/other-kind.toml" <<EOF
[[application]]
name = "elsewhere"
tasks = 1
[application.gpu]
gpus = 1
kind = "no-such-gpu"
command = ["true"]
EOF
if ERR=$("$B" submit "$W/other-kind.toml" 2>&1); then fail "5. a job of a kind no node has was accepted"; fi
grep -q "no-such-gpu" <<< "$ERR" || fail "5. the refusal does not name the kind: $ERR"
echo "5. refused: $ERR"

if unshare -m true 2>/dev/null; then
    : > "$W/empty"
    HIDE=""
    for f in $(ldconfig -p | awk '/libnvidia-ml\.so\.1 / {print $NF}'); do
        HIDE="$HIDE mount --bind $W/empty $(realpath "$f") &&"
    done
    unshare -m sh -c "$HIDE exec '$B' agent --server http://127.0.0.1:$P \
        --token-file '$W/data/agent-token' --name nnode01 --work-dir '$W/nwork'" \
        > "$W/nnode.log" 2>&1 &
    for _ in $(seq 50); do
        "$B" bindings 2>/dev/null | grep -q "<- nnode01" && break
        sleep 0.2
    done
    "$B" bindings | grep -q "gpu01.*<- nnode01" || fail "6. nnode01 is not bound to gpu01: $("$B" bindings 2>&1)"
    grep "NVML did not load" "$W/nnode.log"
    "$B" submit --requires node:nnode01 --gpus 1 --wait -- python3 -c 'import os, torch
a = torch.randn(4096, 4096, device="cuda")
print("offloaded from nnode01, ran on", os.environ["HETSCHED_NODE"], "device", torch.cuda.get_device_name(0), "sum", float((a @ a).abs().sum()) > 0)' \
        || fail "6. the offloaded GPU task failed"
    TASK=$("$B" tasks --job last --output json)
    python3 -c 'import json,sys; t=json.load(sys.stdin)[0]; sys.exit(0 if (t["node"], t["executed_node"], t["variant"]) == ("nnode01", "gpu01", "gpu") else 1)' <<< "$TASK" \
        || fail "6. the task was not placed on nnode01 and run on gpu01: $TASK"
    OUT=$("$B" log last python3:0)
    grep -q "ran on gpu01 device NVIDIA" <<< "$OUT" || fail "6. the offloaded task's output: $OUT"
    M=$(python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["usage"]["max_gpu_memory_bytes"])' <<< "$TASK")
    [ "$M" -ge $((64 << 20)) ] || fail "6. the offloaded task's peak GPU memory is $M bytes, below its 64 MiB matrix"
    echo "6. offloaded: $OUT; peak GPU memory $M bytes"
else
    echo "6. skipped: unshare -m is not allowed here"
fi
echo "all checks passed"
