#!/usr/bin/env bash
# Ring allreduce across processes over loopback: internal/collective (ours,
# bench/collective_test.go's TestCollectiveMember) against torch.distributed's
# gloo (bench/gloo_allreduce.py), measured the same way: N member processes,
# float32 buffers, warm-up, a barrier, then each allreduce timed on rank 0;
# alg MB/s = buffer bytes / median time of one allreduce.
#
# The two run interleaved, one (members, size) pair after the other, for
# ROUNDS rounds (which one goes first alternates by round), so that each
# ratio is taken side by side on a shared machine. Prints a table: ours and
# gloo alg MB/s (range of the rounds' medians), the median over rounds of
# ours/gloo, and the CPU time (user + system, all threads) rank 0 spends per
# allreduce.
#
# Environment: ROUNDS (3), MEMBERS ("2 3"), SIZES (MiB, "1 16 64"),
# GLOO_THREADS (torch.set_num_threads per gloo process, 1; 0: torch's
# default), PYTHON (/usr/bin/python3, which must have torch: Debian's
# python3-torch), RAW (file to keep the RESULT lines in).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
MEMBERS=${MEMBERS:-"2 3"}
SIZES=${SIZES:-"1 16 64"}
GLOO_THREADS=${GLOO_THREADS:-1}
PYTHON=${PYTHON:-/usr/bin/python3}

if ! "$PYTHON" -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null; then
	echo "collective_vs_gloo: $PYTHON has no torch with gloo (apt-get install python3-torch); skipped"
	exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
raw=${RAW:-$tmp/raw.txt}
: >"$raw"
go test -c -o "$tmp/bench.test" ./bench

iters() { # timed allreduces per run: about a second of ours at each size
	case $1 in
	1) echo 100 ;; 16) echo 30 ;; *) echo 12 ;;
	esac
}

ours() { # members MiB
	local n=$1 mib=$2 port=$((20000 + RANDOM % 20000)) pids=() r rc=0
	for ((r = 0; r < n; r++)); do
		EDL_COLL_RANK=$r EDL_COLL_WORLD=$n EDL_COLL_PORT=$port EDL_COLL_MIB=$mib \
			EDL_COLL_WARMUP=3 EDL_COLL_ITERS=$(iters "$mib") \
			"$tmp/bench.test" -test.run '^TestCollectiveMember$' >"$tmp/ours.$r" &
		pids+=($!)
	done
	for p in "${pids[@]}"; do wait "$p" || rc=$?; done
	grep '^RESULT' "$tmp/ours.0" | tee -a "$raw" || rc=1
	return $rc
}

gloo() { # members MiB
	"$PYTHON" bench/gloo_allreduce.py --members "$1" --mib "$2" --iters "$(iters "$2")" \
		--warmup 3 --threads "$GLOO_THREADS" --port $((20000 + RANDOM % 20000)) | tee -a "$raw"
}

go version
"$PYTHON" -c 'import torch; print("torch", torch.__version__, "default threads", torch.get_num_threads())'
echo "gloo threads per process: $GLOO_THREADS (0: torch's default)"
for ((round = 1; round <= ROUNDS; round++)); do
	for n in $MEMBERS; do
		for mib in $SIZES; do
			if ((round % 2)); then ours "$n" "$mib"; gloo "$n" "$mib"; else gloo "$n" "$mib"; ours "$n" "$mib"; fi
		done
	done
done

"$PYTHON" - "$raw" <<'EOF'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    kv = dict(f.split("=", 1) for f in line.split()[1:])
    r = runs.setdefault((int(kv["members"]), int(kv["mib"])), {"ours": [], "gloo": []})
    r[kv["impl"]].append((float(kv["alg_MBps"]), 1e3 * (float(kv["user_s_op"]) + float(kv["sys_s_op"]))))
rng = lambda xs: f"{min(xs):.0f}–{max(xs):.0f}"
print()
print("| members | buffer | ours alg MB/s | gloo alg MB/s | ours / gloo (median) | CPU ms/op of rank 0: ours, gloo (medians) |")
print("| --- | --- | --- | --- | --- | --- |")
for (n, mib), r in sorted(runs.items()):
    ratios = [o[0] / g[0] for o, g in zip(r["ours"], r["gloo"])]
    alg = {k: [x[0] for x in v] for k, v in r.items()}
    cpu = {k: statistics.median(x[1] for x in v) for k, v in r.items()}
    print(f"| {n} | {mib} MiB | {rng(alg['ours'])} | {rng(alg['gloo'])} | {statistics.median(ratios):.2f}× "
          f"| {cpu['ours']:.1f}, {cpu['gloo']:.1f} |")
EOF
