#!/usr/bin/env bash
# `make test`: set-up, the services, lint and the whole suite, the services stopped, and a table of
# where the minutes went (so the next slow-down is visible). Lint runs beside the suite: mypy is
# CPU-bound while most of the suite waits on Kafka and processes, so together they take less time
# than one after the other. The suite runs on pytest-xdist workers, each module on one worker.
set -uo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
WORKERS=${TEST_WORKERS:-4}
status=0
phases=()

now() { date +%s.%N; }
record() {  # name start end rc
  phases+=("$(printf '%-34s %7.1f s  %s' "$1" "$(awk "BEGIN { print $3 - $2 }")" "$([ "$4" -eq 0 ] && echo ok || echo "FAILED ($4)")")")
  [ "$4" -eq 0 ] || status=1
}
phase() {  # name command...
  local name=$1 start rc
  shift
  start=$(now)
  "$@"
  rc=$?
  record "$name" "$start" "$(now)" "$rc"
  return $rc
}

begin=$(now)
phase "set-up (venv, Debian packages)" make --no-print-directory setup || { printf '%s\n' "${phases[@]}"; exit 1; }
phase "services up (Kafka, registry)" "$VENV/bin/agentlog" infra up
phase "schemas registered" "$VENV/bin/agentlog" schemas register

lint_log=$(mktemp)
lint_start=$(now)
(
  make --no-print-directory lint >"$lint_log" 2>&1
  echo $? >"$lint_log.rc"
  now >"$lint_log.end"
) &
lint_pid=$!

suite_log=$(mktemp)
suite() { "$VENV/bin/python" -m pytest -n "$WORKERS" --dist loadscope --durations=20 2>&1 | tee "$suite_log"; }
phase "suite (pytest -n $WORKERS)" suite
# A green run prints only test progress and results; librdkafka's log lines (`%3|...|FAIL|...`) come
# from a Kafka client that outlived its test, which tests/conftest.py's open-client check should catch.
rdkafka_lines=$(grep -c '^%[0-9]|' "$suite_log" || true)
rm -f "$suite_log"
wait "$lint_pid"
lint_rc=$(cat "$lint_log.rc" 2>/dev/null || echo 1)
lint_end=$(cat "$lint_log.end" 2>/dev/null || now)
echo "---- make lint (ran beside the suite) ----"
cat "$lint_log"
record "lint (ruff, mypy, import-linter)" "$lint_start" "$lint_end" "$lint_rc"
rm -f "$lint_log" "$lint_log.rc" "$lint_log.end"

phase "services down" "$VENV/bin/agentlog" infra down
echo
echo "---- make test: where the time went ----"
printf '%s\n' "${phases[@]}"
printf '%-34s %7s    %s\n' "librdkafka log lines in the suite" "$rdkafka_lines" "$([ "$rdkafka_lines" -eq 0 ] && echo none || echo 'a Kafka client outlived its test')"
printf '%-34s %7.1f s  %s\n' "total (wall)" "$(awk "BEGIN { print $(now) - $begin }")" "$([ $status -eq 0 ] && echo ok || echo FAILED)"
exit $status
