#!/usr/bin/env bash
# Checks the mpirun command line that deploy/launch.sh builds.
set -euo pipefail
launch="$1"
fail() { echo "FAIL: $*" >&2; exit 1; }

out=$("$launch" --tp 4 --binary /opt/verdict --dry-run -- --model /m --port 9000)
[[ "$out" == "mpirun -np 4 --bind-to none "* ]] || fail "unexpected prefix: $out"
[[ "$out" == *"-x NCCL_NVLS_ENABLE"* ]] || fail "NCCL_NVLS_ENABLE not exported: $out"
[[ "$out" == *"/opt/verdict serve --tp 4 --model /m --port 9000"* ]] || fail "bad tail: $out"

# One node: MPI and NCCL keep to the loopback interface.
[[ "$out" == *"--mca btl_tcp_if_include lo --mca oob_tcp_if_include lo"* ]] ||
  fail "single-node job not kept on lo: $out"
[[ "$out" == *"-x NCCL_SOCKET_IFNAME"* ]] || fail "NCCL_SOCKET_IFNAME not exported: $out"

out=$("$launch" --tp 8 --hostfile hosts.txt --iface eth1 --binary v --dry-run)
[[ "$out" == *"--map-by slot --hostfile hosts.txt"* ]] || fail "hostfile not passed: $out"
[[ "$out" == *"--mca btl_tcp_if_include eth1 --mca oob_tcp_if_include eth1"* ]] ||
  fail "--iface not passed: $out"
# Across nodes without an interface named: refused, naming the flag.
if err=$("$launch" --tp 8 --hostfile hosts.txt --binary v --dry-run 2>&1); then
  fail "a multi-node job without --iface was accepted: $err"
fi
[[ "$err" == *"--iface"* ]] || fail "the refusal does not name --iface: $err"

if "$launch" --tp 0 --dry-run 2>/dev/null; then fail "--tp 0 accepted"; fi
if "$launch" --bogus --dry-run 2>/dev/null; then fail "unknown option accepted"; fi
echo PASS dry run

# Stopping: SIGTERM to launch.sh reaches the ranks, not mpirun (which would
# kill the job a second later instead of letting it drain). A stand-in
# mpirun starts two "ranks" that finish cleanly on SIGTERM.
fake=$(mktemp -d)
trap 'rm -rf "$fake"' EXIT
cat > "$fake/mpirun" <<'FAKE'
#!/usr/bin/env bash
trap 'echo mpirun-signalled >> "$LOG"; exit 143' TERM INT
for r in 0 1; do
  bash -c 'trap "echo rank$0-drained >> \"$LOG\"; exit 0" TERM; echo rank$0-up >> "$LOG";
           while :; do sleep 0.05; done' "$r" &
done
wait
wait
FAKE
chmod +x "$fake/mpirun"
export LOG="$fake/log"
PATH="$fake:$PATH" "$launch" --tp 2 --binary v -- --port 1 &
pid=$!
for _ in $(seq 100); do
  [[ $(grep -c -- '-up' "$LOG" 2>/dev/null) == 2 ]] && break
  sleep 0.05
done
[[ $(grep -c -- '-up' "$LOG") == 2 ]] || fail "the stand-in ranks did not start"
kill -TERM "$pid"
set +e
wait "$pid"
rc=$?
set -e
[[ $rc == 0 ]] || fail "launch.sh exited $rc after SIGTERM: $(cat "$LOG")"
grep -q rank0-drained "$LOG" && grep -q rank1-drained "$LOG" ||
  fail "the ranks did not get SIGTERM: $(cat "$LOG")"
if grep -q mpirun-signalled "$LOG"; then fail "mpirun got the signal: $(cat "$LOG")"; fi
echo PASS stop
