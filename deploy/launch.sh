#!/usr/bin/env bash
# Launches verdict with mpirun: one rank per GPU, rank 0 serves HTTP.
#
#   deploy/launch.sh --tp N [--hostfile FILE] [--iface IF] [--binary PATH] [--dry-run] \
#       -- [verdict serve flags]
#
# Ranks map to GPUs by their local rank on each node (rank r on a node uses
# GPU r); with a hostfile, give each node `slots=<GPUs per node>`
# (deploy/hostfiles/ has examples). --map-by slot fills each node's slots
# before the next node, so one node's ranks are contiguous and rank 0 runs on
# the first host. Inside a Slurm allocation, leave --hostfile out: Open MPI
# takes the hosts from the allocation. The environment every rank gets is
# exported explicitly with -x so that remote nodes see it too.
# NCCL_NVLS_ENABLE=0 keeps NVLink multicast off.
#
# Network: the ranks' MPI and NCCL traffic stays on one interface. --iface IF
# names it (Open MPI's btl_tcp_if_include and oob_tcp_if_include, and
# NCCL_SOCKET_IFNAME); without it, a job on this node alone keeps to the
# loopback interface, and a job across nodes needs --iface (or the
# operator's own OMPI_MCA_* / NCCL_SOCKET_IFNAME settings), so that nothing
# listens on interfaces the operator did not choose.
#
# Stopping: send SIGTERM (or Ctrl-C) to this script. The ranks drain
# in-flight requests (verdict serve --drain-seconds) and exit 0. mpirun
# itself must not get the signal: it answers SIGTERM and SIGINT by ending
# the job, SIGTERM to every rank one second later and SIGKILL a second
# after that (Open MPI's odls_base_sigkill_timeout), which cuts the drain
# short. So mpirun runs in a session of its own and this script passes the
# signal to the ranks mpirun started on this node; one rank's signal drains
# every rank. If no rank runs here, or on a second signal, mpirun gets it
# and ends the job at once.
#
# A rank that dies (killed, crashed) makes mpirun end the job the same way.
# The ranks tell mpirun's SIGTERM from this script's by its sender (their
# parent): rank 0 then ends every stream with an error event and [DONE]
# and every rank exits non-zero at once, inside that second, without
# waiting for --comm-timeout. Raising odls_base_sigkill_timeout would not
# buy them time: mpirun sleeps that long before the SIGTERM too, and its
# output forwarding and MPI_Abort handling stop while it sleeps.
set -euo pipefail

tp=1
hostfile=""
iface=""
binary="${VERDICT_BINARY:-verdict}"
dry_run=0
while (($#)); do
  case "$1" in
    --tp) tp=$2; shift 2 ;;
    --hostfile) hostfile=$2; shift 2 ;;
    --iface) iface=$2; shift 2 ;;
    --binary) binary=$2; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    --) shift; break ;;
    *) echo "launch.sh: unknown option $1 (verdict flags go after --)" >&2; exit 2 ;;
  esac
done
if ! [[ "$tp" =~ ^[1-9][0-9]*$ ]]; then
  echo "launch.sh: --tp must be a positive integer, got '$tp'" >&2
  exit 2
fi

export NCCL_NVLS_ENABLE=0
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1
export NVSHMEM_DISABLE_NVLS=1

multi_node=0
if [[ -n "$hostfile" || -n "${SLURM_JOB_NUM_NODES:-}" && "${SLURM_JOB_NUM_NODES:-1}" != 1 ]]; then
  multi_node=1
fi
if [[ -z "$iface" && $multi_node == 0 ]]; then iface=lo; fi
if [[ -n "$iface" ]]; then
  export NCCL_SOCKET_IFNAME="$iface"
elif [[ -z "${OMPI_MCA_btl_tcp_if_include:-}" || -z "${NCCL_SOCKET_IFNAME:-}" ]]; then
  echo "launch.sh: a job across nodes needs --iface IF (the interface MPI and NCCL use)," \
       "or OMPI_MCA_btl_tcp_if_include, OMPI_MCA_oob_tcp_if_include and NCCL_SOCKET_IFNAME" >&2
  exit 2
fi

cmd=(mpirun -np "$tp" --bind-to none --map-by slot)
if [[ -n "$hostfile" ]]; then cmd+=(--hostfile "$hostfile"); fi
if [[ -n "$iface" ]]; then
  cmd+=(--mca btl_tcp_if_include "$iface" --mca oob_tcp_if_include "$iface")
fi
if [[ $(id -u) -eq 0 ]]; then cmd+=(--allow-run-as-root); fi
for var in NCCL_NVLS_ENABLE TORCH_SYMM_MEM_DISABLE_MULTICAST NVSHMEM_DISABLE_NVLS \
           NCCL_DEBUG NCCL_SOCKET_IFNAME NCCL_IB_HCA CUDA_VISIBLE_DEVICES; do
  if [[ -n "${!var:-}" ]]; then cmd+=(-x "$var"); fi
done
cmd+=("$binary" serve --tp "$tp" "$@")

if ((dry_run)); then
  printf '%q ' "${cmd[@]}"
  echo
  exit 0
fi

# A background job of a non-interactive shell is not a process group
# leader, so setsid runs mpirun in place: $! is mpirun's pid.
setsid "${cmd[@]}" &
mpirun_pid=$!

# The processes whose parent is mpirun: the ranks on this node.
local_ranks() {
  local stat pid rest ppid
  for stat in /proc/[0-9]*/stat; do
    # Fields after the command (which may hold spaces): state, then ppid.
    { read -r line < "$stat"; } 2>/dev/null || continue
    pid=${stat#/proc/}; pid=${pid%/stat}
    rest=${line##*) }
    read -r _ ppid _ <<< "$rest"
    if [[ "$ppid" == "$mpirun_pid" ]]; then echo "$pid"; fi
  done
}

signals=0
stop() {
  local ranks
  signals=$((signals + 1))
  ranks=$(local_ranks)
  if ((signals > 1)); then
    # A second signal: stop now, through mpirun.
    echo "launch.sh: stopping the job now" >&2
    kill -TERM "$mpirun_pid" 2>/dev/null || true
  elif [[ -n "$ranks" ]]; then
    echo "launch.sh: asking the ranks to drain (SIGTERM to $(echo $ranks))" >&2
    # shellcheck disable=SC2086
    kill -TERM $ranks 2>/dev/null || true
  else
    kill -TERM "$mpirun_pid" 2>/dev/null || true
  fi
}
trap stop TERM INT HUP

# wait returns early when a trapped signal arrives; keep waiting for mpirun.
status=0
while true; do
  set +e
  wait "$mpirun_pid"
  status=$?
  set -e
  kill -0 "$mpirun_pid" 2>/dev/null || break
done
exit "$status"
