# Helpers the bench scripts share; sourced after SECTIONS and RESULTS are set.
die() { echo "bench/$(basename "$0"): $*" >&2; exit 1; }
has_section() { [[ " $SECTIONS " == *" $1 "* ]]; }
now() { date +%s.%N; }
calc() { echo "scale=4; $*" | bc; }
fmt() { printf "%.${2:-2}f" "$1"; }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
record() { echo "$1=$2" | tee -a "$RESULTS"; }
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches; }
