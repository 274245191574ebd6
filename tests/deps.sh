#!/bin/sh
# Install the Debian packages cellc needs, when missing (apt-get, no recommends).
pkgs="re2c bison llvm-dev clang libclang-rt-14-dev libomp-14-dev valgrind libopenblas-dev liblapack-dev libplplot-dev plplot-driver-cairo libcriterion-dev libcjson-dev libopenmpi-dev openmpi-bin python3-torch python3-numpy"
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "make deps: installing$missing"
SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
$SUDO apt-get update -qq || true
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
