#!/usr/bin/env bash
# Installs what the network-partition faults need (iptables with its cgroup match), from
# Debian's packages. Run as root; does nothing when iptables is already there.
set -euo pipefail
if command -v iptables >/dev/null 2>&1; then
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq iptables
