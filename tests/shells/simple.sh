# No subshells, no other programs: the shell alone, in the locale it was given.
s="héllo wörld"
echo "len=${#s} first=${s:0:2}"
fact() { local n=$1 acc=1; while [ "$n" -gt 1 ]; do acc=$((acc * n)); n=$((n - 1)); done; r=$acc; }
for i in 1 5 10; do fact "$i"; printf '%s! = %s\n' "$i" "$r"; done
case "$s" in h*) echo starts-h;; *) echo other;; esac
read -r line; echo "read: $line"
printf '%5.2f|%-4s|%x\n' 3.14159 ab 255
set -- a "b c" d; echo "$# args, second=$2"
echo "to stderr" >&2
echo "written" > out.txt; read -r back < out.txt; echo "file: $back"
[ -e /dev/tty ] && echo tty-exists
false; echo "rc=$?"
exit 3
