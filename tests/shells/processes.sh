# Processes: command substitution, pipes, subshells, background jobs and wait, exec of
# other programs (busybox applets in PATH) and of a #! script, exit statuses, trap handlers
# for signals sent with kill, a background job killed.
x=$(echo sub; echo two)
echo "got: $x"
echo "pipe: $(printf 'b\na\nc\n' | sort | tr '\n' ,)"
( echo in-subshell; exit 7 ); echo "subshell rc=$?"
sleep 0.1 & p=$!; wait $p; echo "bg rc=$?"
( exit 3 ) & wait $!; echo "wait rc=$?"
cat missing-file 2>/dev/null; echo "cat rc=$?"
sh -c 'exit 4'; echo "sh rc=$?"
printf 'x\ny\n' | wc -l
echo hello > f.txt; cat < f.txt | tr a-z A-Z
(exec cat f.txt)
./hashbang.sh one "two words"; echo "script rc=$?"
false | true; echo "pipeline rc=$?"
yes | head -n 2
trap 'echo trapped USR1' USR1
kill -USR1 $$
echo after-trap
sh -c 'trap "echo child-term; exit 4" TERM; kill -TERM $$; echo not-here'; echo "child rc=$?"
sleep 5 & kill $!; wait $!; echo "killed rc=$?"
exec sh -c 'echo exec-replaced; exit 9'
echo not-reached
