# testbed/lib/common.sh: the preamble the testbed scripts share (sourced, bash). Sourcing it
# only defines the functions below and sets ROOT; it changes no shell option, and every
# function is safe under `set -euo pipefail` as well as without it.
#
# Globals the functions set and read:
#   ROOT       the checkout (set when sourced)
#   DATAPLANE  the dataplane binary (--dataplane PATH, or what tb_build_dataplane built)
#   WORK       the run's scratch directory, PREFIX the stem of its EAL --file-prefix
#              values, PIDS its background processes (tb_workdir)
#   MEM, HEAP  EAL memory arguments and the dataplane's `--heap` flag, both arrays
#              (tb_hugepages, tb_no_hugepages)
#
# A script sources it next to itself: `. "$(dirname "$0")/lib/common.sh"`.

# The globals are read by the scripts that source this file.
# shellcheck shell=bash disable=SC2034

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

# tb_usage: the script's header comment (every `#` line after the shebang), for --help.
tb_usage() {
  awk 'NR == 1 { next } /^#/ { print; next } { exit }' "$0"
}

# tb_target_dir: cargo's target directory ($CARGO_TARGET_DIR or target/, relative to ROOT),
# as an absolute path.
tb_target_dir() {
  local dir=${CARGO_TARGET_DIR:-target}
  case $dir in
    /*) echo "$dir" ;;
    *) echo "$ROOT/$dir" ;;
  esac
}

# tb_build_dataplane PROFILE: `cargo build -q -p dataplane` in ROOT, with --release when
# PROFILE is release (else debug), and DATAPLANE set to the binary. Returns cargo's status
# (DATAPLANE untouched when the build failed).
tb_build_dataplane() {
  local profile=$1 flags=(-q)
  if [ "$profile" = release ]; then flags=(--release -q); fi
  (cd "$ROOT" && cargo build "${flags[@]}" -p dataplane) || return
  DATAPLANE="$(tb_target_dir)/$profile/dataplane"
}

# tb_dataplane NAME PROFILE: unless DATAPLANE is set already, says "NAME: building dataplane
# (PROFILE)" on stderr and builds it (tb_build_dataplane).
tb_dataplane() {
  [ -z "${DATAPLANE:-}" ] || return 0
  echo "$1: building dataplane ($2)" >&2
  tb_build_dataplane "$2"
}

# tb_core_to_core: the one-way cache-line transfer time between CPUs 0 and 1 in ns
# (`dataplane cores`; $DATAPLANE's, else the tree's release build), or nothing. Every rate
# between two pinned processes follows it: on the development VM the host moves the two
# vCPUs between placements of about 25, 45 and 180 ns (README "Performance").
tb_core_to_core() {
  local bin v
  for bin in "${DATAPLANE:-}" "$ROOT/target/release/dataplane"; do
    if [ -z "$bin" ] || [ ! -x "$bin" ]; then continue; fi
    v=$("$bin" cores --cpus 0,1 --round-trips 50000 2>/dev/null |
      sed -nE 's/^core-to-core-ns: ([0-9]+).*/\1/p') || true
    if [ -n "$v" ]; then echo "$v"; return 0; fi
  done
  return 0
}

# tb_speed_probe: the time the machine takes per instruction now, as the typical half round
# trip in µs of the in-process 8 B Write ping-pong (`perf write --loopback --lat -s 8 -n
# 20000`, heap memory, one thread) pinned to CPU 0 and then to CPU 1, the larger of the two
# ($DATAPLANE's, else the tree's release build), or nothing. The run executes the same
# instructions every time (README "Where a small Write's time goes"), so its time moves only
# with the speed the host gives the vCPUs; on the development VM that moves by 2x within
# seconds, whatever the core-to-core mode (`tb_core_to_core`) is.
tb_speed_probe() {
  local bin cpu v worst=""
  for bin in "${DATAPLANE:-}" "$ROOT/target/release/dataplane"; do
    if [ -z "$bin" ] || [ ! -x "$bin" ]; then continue; fi
    for cpu in 0 1; do
      v=$(taskset -c "$cpu" "$bin" perf write --loopback --lat -s 8 -n 20000 --heap \
        --config "$ROOT/configs/rdma-soft-pair.toml" 2>/dev/null |
        awk '/t_typical/ { getline; print $5; exit }') || true
      if [ -z "$v" ]; then worst=""; break; fi
      worst=$(awk -v a="${worst:-0}" -v b="$v" 'BEGIN { print (b + 0 > a + 0) ? b : a }')
    done
    if [ -n "$worst" ]; then echo "$worst"; return 0; fi
  done
  return 0
}

# tb_mode_of A B: the machine's mode over a measurement from the core-to-core latencies (ns)
# before and after it: f (both under 100 ns: the two vCPUs share a cache), s (both 100 or
# more: they do not) or m (it changed, or unknown).
tb_mode_of() {
  if [ -z "$1" ] || [ -z "$2" ]; then echo m
  elif [ "$1" -lt 100 ] && [ "$2" -lt 100 ]; then echo f
  elif [ "$1" -ge 100 ] && [ "$2" -ge 100 ]; then echo s
  else echo m; fi
}

# tb_mode_ratios NAME UNIT LEFT [RATIO MODE [FULL] ...]: the line for ratios each taken within
# one mode (MODE f or s, `tb_mode_of`): "NAME: X.XX (spread A-B over K UNIT; fast X.XX over I,
# slow Y.YY over J; full speed Z.ZZ over H; LEFT left out: mode changed)", the median over all,
# in each mode and over the ratios marked FULL = 1 (both measurements at the run's full
# instruction speed, `tb_speed_probe`); or "NAME: n/a" (with the LEFT left out, if any) when
# there is none.
tb_mode_ratios() {
  local name=$1 unit=$2 left=$3
  shift 3
  if [ $# -eq 0 ]; then
    if [ "$left" -gt 0 ]; then echo "$name: n/a ($left left out: mode changed)"; else echo "$name: n/a"; fi
    return
  fi
  printf '%s\n' "$@" | sort -g | awk -v n="$name" -v unit="$unit" -v left="$left" '
    { v[NR] = $1; by[$2, ++c[$2]] = $1; if ($3 == 1) full[++nf] = $1 }
    END {
      printf "%s: %.2f (spread %.2f-%.2f over %d %s", n, v[int((NR + 1) / 2)], v[1], v[NR], NR, unit
      sep = "; "
      if (c["f"] > 0) { printf "%sfast %.2f over %d", sep, by["f", int((c["f"] + 1) / 2)], c["f"]; sep = ", " }
      if (c["s"] > 0) { printf "%sslow %.2f over %d", sep, by["s", int((c["s"] + 1) / 2)], c["s"] }
      if (nf > 0) printf "; full speed %.2f over %d", full[int((nf + 1) / 2)], nf
      if (left > 0) printf "; %d left out: mode changed", left
      print ")"
    }'
}

# tb_workdir NAME [PREFIX]: WORK (a fresh /tmp/NAME.XXXXXX), PREFIX (none without DPDK)
# and an empty PIDS.
tb_workdir() {
  WORK=$(mktemp -d "/tmp/$1.XXXXXX")
  PREFIX=${2:-}
  PIDS=()
}

# tb_stop GRACE PID...: Ctrl-C to every PID, then to each in turn up to GRACE seconds to
# exit before SIGKILL; reaps them all. Never fails (gone PIDs are fine).
tb_stop() {
  local tries pid i
  tries=$(awk -v g="$1" 'BEGIN { printf "%d", g * 10 }')
  shift
  for pid in "$@"; do kill -INT "$pid" 2>/dev/null || true; done
  for pid in "$@"; do
    for ((i = 0; i < tries; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
}

# tb_remove_runtime: removes the DPDK runtime directories of PREFIX's processes (as root in
# /var/run/dpdk, else in $XDG_RUNTIME_DIR/dpdk) and WORK.
tb_remove_runtime() {
  if [ -n "${PREFIX:-}" ]; then
    rm -rf /var/run/dpdk/"$PREFIX"-* "${XDG_RUNTIME_DIR:-/nonexistent}"/dpdk/"$PREFIX"-*
  fi
  rm -rf "${WORK:-}"
}

# tb_cleanup GRACE: tb_stop GRACE on PIDS, then tb_remove_runtime; the EXIT trap of a script
# that has nothing else to undo (`trap 'tb_cleanup 0.3' EXIT`).
tb_cleanup() {
  tb_stop "$1" "${PIDS[@]}"
  tb_remove_runtime
}

# tb_no_hugepages: MEM and HEAP for a process without hugepages: `--no-huge -m 512`, and
# registered memory from the heap.
tb_no_hugepages() {
  MEM=(--no-huge -m 512)
  HEAP=(--heap)
}

# tb_hugepages MIN MIB: with at least MIN free 2 MiB hugepages and hugetlbfs mounted,
# MEM=(-m MIB) and no HEAP (registered memory in hugepages too), and returns 0; else
# tb_no_hugepages and returns 1. HUGE_FREE is the number of free hugepages.
tb_hugepages() {
  HUGE_FREE=$(cat /sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages 2>/dev/null || echo 0)
  if [ "$HUGE_FREE" -ge "$1" ] && grep -q hugetlbfs /proc/mounts; then
    MEM=(-m "$2")
    HEAP=()
    return 0
  fi
  tb_no_hugepages
  return 1
}

# tb_config FILE LCORE FILE_PREFIX VDEV IPV4/LEN [KEY=VALUE ...]: the dataplane config of one
# DPDK port, device VDEV (EAL args: MEM, --no-pci, -l LCORE, --file-prefix FILE_PREFIX,
# --vdev VDEV; EAL's control threads on LCORE's CPU, not on the other process's), no
# periodic statistics; an empty IPV4/LEN gives the port no IPv4 address.
# Keys:
#   device=NAME  the device the port opens (default: VDEV's name)
#   port=NAME    the port's name (default memif0)
#   mtu=N        default 1500
#   eal='ARGS'   more EAL arguments, after --no-pci (e.g. eal=--no-telemetry)
#   rings=1      2048 Rx and Tx descriptors and a pool of 16383 mbufs
#   ipv6=A/LEN   an IPv6 address too (or only)
#   vlan=N       802.1Q VLAN N; vlan_priority=P its tags' priority
tb_config() {
  local file=$1 lcore=$2 prefix=$3 vdev=$4 ip=$5 kv
  local device=${4%%,*} port=memif0 mtu=1500 eal=() rings=0 args list extra=()
  shift 5
  if [ -n "$ip" ]; then extra+=("ipv4 = \"$ip\""); fi
  for kv in "$@"; do
    case $kv in
      device=*) device=${kv#*=} ;;
      port=*) port=${kv#*=} ;;
      mtu=*) mtu=${kv#*=} ;;
      eal=*) read -ra eal <<<"${kv#*=}" ;;
      rings=*) rings=${kv#*=} ;;
      ipv6=*) extra+=("ipv6 = \"${kv#*=}\"") ;;
      vlan=*) extra+=("vlan = ${kv#*=}") ;;
      vlan_priority=*) extra+=("vlan_priority = ${kv#*=}") ;;
      *) echo "tb_config: unknown key '$kv'" >&2; return 2 ;;
    esac
  done
  args=("${MEM[@]}" --no-pci "${eal[@]}" -l "$lcore" --file-prefix "$prefix" --vdev "$vdev")
  printf -v list '"%s", ' "${args[@]}"
  {
    cat <<EOF
[eal]
args = [${list%, }]
control_threads = "main-lcore"
[poll]
stats_interval = 0
[[ports]]
name = "$port"
backend = "dpdk"
device = "$device"
mtu = $mtu
EOF
    printf '%s\n' "${extra[@]}"
    if [ "$rings" = 1 ]; then printf 'rx_desc = 2048\ntx_desc = 2048\npool_size = 16383\n'; fi
  } >"$file"
}

# tb_vhost_tso_pair NET MODE: configs for the two ends of a vhost-user/virtio-user pair
# through $WORK/vhost.sock at MTU 1500 with the ports' offloads set to MODE (`auto`: checksums,
# and TSO where virtio-user has it; `off`): $WORK/server-vhost-MODE.toml (the vhost-user
# backend, NET.1/24 on lcore 0, offering TSO and taking a TSO frame into one buffer
# (linear-buffer, ext-buffer) rather than a chain of mbufs the port would copy out of) and
# $WORK/client-vhost-MODE.toml (virtio-user, NET.2/24 on lcore 1); 2048 descriptors,
# --single-file-segments.
tb_vhost_tso_pair() {
  local net=$1 mode=$2 role lcore host vdev
  for role in server client; do
    if [ "$role" = server ]; then
      lcore=0 host=1
      vdev="net_vhost0,iface=$WORK/vhost.sock,queues=1,tso=1,linear-buffer=1,ext-buffer=1"
    else
      lcore=1 host=2
      vdev="virtio_user0,path=$WORK/vhost.sock,queues=1"
    fi
    tb_config "$WORK/$role-vhost-$mode.toml" "$lcore" "$PREFIX-v$role" "$vdev" \
      "$net.$host/24" port=vhost0 rings=1 eal=--single-file-segments || return
    echo "offloads = \"$mode\"" >>"$WORK/$role-vhost-$mode.toml"
  done
}

# tb_llvm_profdata: the path of rustc's own llvm-profdata (rustup's llvm-tools component, in
# the toolchain's sysroot; a profile is read only by the LLVM that wrote it), whether or not
# it is installed there.
tb_llvm_profdata() {
  local sysroot host
  sysroot=$(rustc --print sysroot) || return
  host=$(rustc -vV | awk '/^host:/ { print $2 }')
  echo "$sysroot/lib/rustlib/$host/bin/llvm-profdata"
}

# tb_memif_pair NET [KEY=VALUE ...]: configs for the two ends of a memif pair through
# $WORK/memif.sock: $WORK/server.toml (NET.1/24 on lcore 0, memif server, file prefix
# $PREFIX-server) and $WORK/client.toml (NET.2/24 on lcore 1, memif client, $PREFIX-client).
# An empty NET gives no IPv4 addresses. Keys: suffix=S (files serverS.toml and
# clientS.toml), prefix=P (file prefixes P-server and P-client), memif=,K=V... (more memif
# device arguments), net6=PREFIX (IPv6 addresses PREFIX::1/64 and PREFIX::2/64), and every
# tb_config key.
tb_memif_pair() {
  local net=$1 suffix="" prefix=$PREFIX devargs="" net6="" kv role lcore host ip v6 pass=()
  shift
  for kv in "$@"; do
    case $kv in
      suffix=*) suffix=${kv#*=} ;;
      prefix=*) prefix=${kv#*=} ;;
      memif=*) devargs=${kv#*=} ;;
      net6=*) net6=${kv#*=} ;;
      *) pass+=("$kv") ;;
    esac
  done
  for role in server client; do
    if [ "$role" = server ]; then lcore=0; host=1; else lcore=1; host=2; fi
    ip=""
    v6=()
    if [ -n "$net" ]; then ip="$net.$host/24"; fi
    if [ -n "$net6" ]; then v6=("ipv6=$net6::$host/64"); fi
    tb_config "$WORK/$role$suffix.toml" "$lcore" "$prefix-$role" \
      "net_memif0,role=$role,id=0,socket=$WORK/memif.sock$devargs" "$ip" \
      "${v6[@]}" "${pass[@]}" || return
  done
}

# tb_median VALUE...: the median of the numbers (the lower middle one of an even count).
tb_median() {
  printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}

# tb_start_server TRIES OUT ERR ARGS...: `$DATAPLANE ARGS...` in the background, stdout to
# OUT and stderr to ERR (which may be OUT), its PID in SERVER_PID and added to PIDS; waits up
# to TRIES x 0.1 s, while it runs, until OUT says "listening". Returns 1 if it never did.
tb_start_server() {
  local tries=$1 out=$2 err=$3 i
  shift 3
  if [ "$err" = "$out" ]; then
    "$DATAPLANE" "$@" >"$out" 2>&1 &
  else
    "$DATAPLANE" "$@" >"$out" 2>"$err" &
  fi
  SERVER_PID=$!
  PIDS+=("$SERVER_PID")
  for ((i = 0; i < tries; i++)); do
    grep -q listening "$out" 2>/dev/null && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || break
    sleep 0.1
  done
  grep -q listening "$out" 2>/dev/null
}

# tb_cmtime_check LOG [fast]: librdmacm's cmtime printed its table of every connection step
# into LOG; with `fast` (the listener is the data plane's), no connect took 1 s or more
# (TCP's first SYN retransmission: the listener dropped a SYN). Prints what is wrong and
# fails otherwise.
tb_cmtime_check() {
  local step max
  for step in "create id" "resolve addr" "resolve route" "create qp" connect disconnect destroy; do
    grep -qE "^$step *: +[0-9.]+ +[0-9.]+ " "$1" ||
      { echo "no '$step' row in cmtime's table: $(tail -1 "$1" | cut -c1-200)"; return 1; }
  done
  [ "${2:-}" = fast ] || return 0
  max=$(awk '$1 == "connect" && $2 == ":" { print $4 }' "$1")
  awk -v m="$max" 'BEGIN { exit !(m < 1000) }' ||
    { echo "a connect took $max ms (a SYN sent again)"; return 1; }
}

# tb_counter NAME FILE: the last value of the `NAME: N` lines in FILE (nothing if none).
tb_counter() {
  sed -nE "s/^$1: ([0-9]+)$/\1/p" "$2" | tail -1
}
