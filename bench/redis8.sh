#!/usr/bin/env bash
# Redis 8.0 for the benches, on a machine whose own redis-server is older (Debian 12's 7.0.15): the server
# deploy/ runs (redis:8.0), so its figures can be measured here too. Takes Debian 13's packages (apt's
# signature check against the system's Debian keyring), unpacks them into a cache folder with the C
# library they were built against, and prints a folder holding `redis-server` and `redis-cli` that run
# through that library's own loader. Installs nothing system-wide; runs again at once from the cache.
#
#   PATH="$(bench/redis8.sh):$PATH" .venv/bin/python -m bench.bench_cluster --single-replica
#
# Needs apt-get and dpkg-deb (Debian, Ubuntu) and the Debian archive's keyring; REDIS8_DIR moves the cache.
set -euo pipefail

dir=${REDIS8_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/streamcrew/redis8}
if [ -x "$dir/bin/redis-server" ] && [ -x "$dir/bin/redis-cli" ]; then
  echo "$dir/bin"
  exit 0
fi

keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -r "$keyring" ] || { echo "redis8.sh: needs $keyring (package debian-archive-keyring)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/state/lists/partial" "$work/cache/archives/partial" "$work/debs" "$work/root"
echo "deb [signed-by=$keyring] http://deb.debian.org/debian trixie main" > "$work/sources.list"
apt=(apt-get -q -o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/nonexistent
     -o "Dir::State=$work/state" -o "Dir::Cache=$work/cache" -o Debug::NoLocking=1 -o APT::Sandbox::User=root)
"${apt[@]}" update >&2
# the server, its tools, and every library they load, at trixie's versions (a newer glibc than the host's)
(cd "$work/debs" && "${apt[@]}" download redis-server redis-tools libc6 libssl3t64 libjemalloc2 liblzf1 \
  libatomic1 libstdc++6 libgcc-s1 libsystemd0 libcap2 >&2)
for deb in "$work"/debs/*.deb; do dpkg-deb -x "$deb" "$work/root"; done

loader=$(find "$work/root" -type f -name 'ld-linux*.so.*' | head -n 1)
[ -n "$loader" ] || { echo "redis8.sh: no dynamic loader in Debian 13's libc6" >&2; exit 1; }
libs=$(dirname "$loader")
rm -rf "$dir"
mkdir -p "$dir/bin"
cp -a "$work/root/." "$dir/root/"
root="$dir/root"
for tool in redis-server redis-cli; do
  # exec: the process is the server itself (its PID is what the benches and tests signal)
  cat > "$dir/bin/$tool" <<SCRIPT
#!/bin/sh
exec "$root${loader#"$work/root"}" --library-path "$root${libs#"$work/root"}" --argv0 $tool "$root/usr/bin/$tool" "\$@"
SCRIPT
  chmod +x "$dir/bin/$tool"
done
"$dir/bin/redis-server" --version >&2
echo "$dir/bin"
