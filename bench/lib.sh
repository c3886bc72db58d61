# Helpers the bench scripts share. has_section and record need SECTIONS and RESULTS set.
die() { echo "bench/$(basename "$0"): $*" >&2; exit 1; }
has_section() { [[ " $SECTIONS " == *" $1 "* ]]; }
now() { date +%s.%N; }
elapsed() { echo "$2 - $1" | bc; }  # T0 T1: seconds between two now()s
calc() { echo "scale=4; $*" | bc; }
mbs() { echo "scale=1; $1 / $2 / 1000000" | bc; }  # BYTES SECONDS: MB/s
fmt() { printf "%.${2:-2}f" "$1"; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
record() { echo "$1=$2" | tee -a "$RESULTS"; }
drop_caches() {
  sync
  echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || echo "(cannot drop caches: not root)" >&2
}
