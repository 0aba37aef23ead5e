#!/usr/bin/env bash
# Makes sure Debian's chromium and chromium-driver are installed, for
# make test-ui (a test that drives a headless browser over WebDriver):
#
#   bash scripts/ui-browser.sh
#
# Does nothing when chromium and chromedriver are on the PATH already.
# Otherwise installs both with apt-get, as root or through sudo, running
# apt-get update first only when the package lists do not have them.
set -euo pipefail

if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
	exit 0
fi
if ! command -v apt-get >/dev/null; then
	echo "make test-ui needs chromium and chromedriver on the PATH (on Debian: apt-get install chromium chromium-driver)" >&2
	exit 1
fi
as_root=()
if [ "$(id -u)" != 0 ]; then
	if ! command -v sudo >/dev/null; then
		echo "make test-ui: chromium and chromium-driver are missing, and installing them needs root or sudo" >&2
		exit 1
	fi
	as_root=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
install=("${as_root[@]}" apt-get install -y -q --no-install-recommends chromium chromium-driver)
if ! "${install[@]}"; then
	"${as_root[@]}" apt-get update -q
	"${install[@]}"
fi
command -v chromium >/dev/null && command -v chromedriver >/dev/null
