# Processes: command substitution, pipes, subshells, background jobs and wait, exec of
# other programs (busybox applets in PATH) and of a #! script, exit statuses.
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
exec sh -c 'echo exec-replaced; exit 9'
echo not-reached
