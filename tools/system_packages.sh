#!/usr/bin/env bash
# Installs the Debian packages of infra/debian-packages.txt whose file is missing (the UI tests'
# Chromium, ...), so `make test` on a fresh machine needs nothing installed by hand.
set -euo pipefail
list="$(dirname "$0")/../infra/debian-packages.txt"
missing=()
while read -r package path; do
  [[ -z "$package" || "$package" == \#* ]] && continue
  [[ -e "$path" ]] || missing+=("$package")
done <"$list"
[[ ${#missing[@]} -eq 0 ]] && exit 0
sudo=""
[[ "$(id -u)" -eq 0 ]] || sudo="sudo"
echo "agentlog setup: installing Debian packages ${missing[*]} (apt-get; a minute or two when cold)"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "agentlog setup: installed ${missing[*]}"
