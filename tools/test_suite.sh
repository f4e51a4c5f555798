#!/usr/bin/env bash
# `make test`: set-up, the services, the whole suite, the services stopped, and a table of where the
# minutes and the CPU went (so the next slow-down is visible). The suite runs on pytest-xdist
# workers, each module on one worker. It is CPU-bound on a two-core machine, so lint (mypy strict
# alone is a minute and a half of CPU) is `make lint`, which CI runs after it (.ci/run).
set -uo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
WORKERS=${TEST_WORKERS:-4}
# Which tests: `make test` passes "not long", `make test-long` passes "long" (tests/conftest.py LONG).
MARK=${TEST_MARK:-}
status=0
phases=()

now() { date +%s.%N; }
# CPU seconds (user + system) of a process and its reaped children, from /proc (0 if it is gone).
proc_cpu() { awk -v t="$(getconf CLK_TCK)" '{ print ($14 + $15 + $16 + $17) / t }' "/proc/$1/stat" 2>/dev/null || echo 0; }
# CPU seconds the whole machine spent busy since boot (user, nice, system, irq, softirq).
machine_cpu() { awk -v t="$(getconf CLK_TCK)" '/^cpu / { print ($2 + $3 + $4 + $7 + $8) / t }' /proc/stat; }
service_pids() {  # kafka, the registry, the postmaster (its backends are reaped children)
  for file in .agentlog/kafka/kafka.pid .agentlog/registry/registry.pid .agentlog/postgres/data/postmaster.pid; do
    [ -f "$file" ] && awk 'NR == 1 { print $1 }' "$file"
  done
}
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

suite_log=$(mktemp)
machine_before=$(machine_cpu)
services_before=0
for pid in $(service_pids); do services_before=$(awk "BEGIN { print $services_before + $(proc_cpu "$pid") }"); done
suite() { "$VENV/bin/python" -m pytest -n "$WORKERS" --dist loadscope --durations=20 ${MARK:+-m "$MARK"} 2>&1 | tee "$suite_log"; }
phase "suite (pytest -n $WORKERS${MARK:+ -m \"$MARK\"})" suite
# A green run prints only test progress and results; librdkafka's log lines (`%3|...|FAIL|...`) come
# from a Kafka client that outlived its test, which tests/conftest.py's open-client check should catch.
rdkafka_lines=$(grep -c '^%[0-9]|' "$suite_log" || true)
rm -f "$suite_log"
machine_used=$(awk "BEGIN { print $(machine_cpu) - $machine_before }")
services_used=0
for pid in $(service_pids); do services_used=$(awk "BEGIN { print $services_used + $(proc_cpu "$pid") }"); done
services_used=$(awk "BEGIN { print $services_used - $services_before }")
phase "services down" "$VENV/bin/agentlog" infra down
echo
echo "---- make test: where the time went ----"
printf '%s\n' "${phases[@]}"
printf '%-34s %7.0f s  %s\n' "CPU busy during the suite" "$machine_used" "of $(nproc) cores; Kafka, registry and PostgreSQL: $(printf '%.0f' "$services_used") s"
printf '%-34s %7s    %s\n' "librdkafka log lines in the suite" "$rdkafka_lines" "$([ "$rdkafka_lines" -eq 0 ] && echo none || echo 'a Kafka client outlived its test')"
printf '%-34s %7.1f s  %s\n' "total (wall)" "$(awk "BEGIN { print $(now) - $begin }")" "$([ $status -eq 0 ] && echo ok || echo FAILED)"
exit $status
