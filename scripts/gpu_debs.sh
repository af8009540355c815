#!/usr/bin/env bash
# Downloads (never installs) the Debian packages that building placer needs and the GPU machine
# lacks, into .gpu-debs/ (ignored by git), for scripts/gpu_check.sh to unpack there into a private
# prefix. Run it here, on the Debian machine, before a device call that carries ".gpu-debs".
# Idempotent: a package already downloaded at the candidate version is kept; an older one is
# replaced. Prints the total size, which travels with the working tree (64 MiB in all).
#
# The set is the build's needs minus what the GPU machine has (its CUDA image holds compilers,
# CMake, ninja, nvcc and python3 with torch, but no -dev packages): headers and CMake packages, the
# runtime libraries they link, and the shared libraries those need beyond a base system (libc,
# libstdc++, libgcc, zlib, bzip2, xz and gmp are in every Debian/Ubuntu base). Not carried:
# googletest's sources, ccache (no cache travels), Fashion-MNIST (no GPU test reads it),
# libonnx1 (only onnx.proto from libonnx-dev is compiled), mpi-default-dev (scotch's -dev
# dependency; placer does not use PT-Scotch) and libstdc++-12-dev (Boost's dependency).
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DEBS_DIR="${PLACER_GPU_DEBS_DIR:-$PLACER_ROOT/.gpu-debs}"

PACKAGES=(
  # yaml-cpp (config), fmt, CLI11, nlohmann-json: headers, CMake packages, libraries
  libyaml-cpp-dev libyaml-cpp0.7
  libfmt-dev libfmt9
  libcli11-dev
  nlohmann-json3-dev
  # protobuf: headers, libraries and protoc (which needs libprotoc)
  libprotobuf-dev libprotobuf32 libprotobuf-lite32 protobuf-compiler libprotoc32
  # GoogleTest and GoogleMock: static libraries and the GTest CMake package
  libgtest-dev libgmock-dev
  # zlib's headers (the library itself is in every base system)
  zlib1g-dev
  # Boost headers and CMake package (placer uses Boost.CRC alone, header-only)
  libboost1.74-dev
  # the baselines' solvers and what their libraries link beyond a base system
  libmetis-dev libmetis5
  libscotch-dev libscotch-7.0
  libglpk-dev libglpk40 libamd2 libcolamd2 libsuitesparseconfig5 libltdl7
  # OpenSSL's libcrypto (the cluster messages' HMAC) and its headers
  libssl-dev libssl3
  # gloo's headers, for c10d's ProcessGroupGloo (runtime/cluster/process_group.h)
  libgloo-dev
  # onnx.proto, compiled into the ONNX loader
  libonnx-dev
  # jemalloc, the programs' allocator (CMakeLists.txt: placer_allocator)
  libjemalloc-dev libjemalloc2
)

if [[ "$(dpkg --print-architecture)" != amd64 ]]; then
  placer_log "error: the GPU machine is x86-64; run this on an amd64 Debian machine"
  exit 1
fi

mkdir -p "$DEBS_DIR"
cd "$DEBS_DIR"

candidate_version() {
  apt-cache show --no-all-versions "$1" 2>/dev/null | awk '/^Version:/ { print $2; exit }'
}

if [[ -z "$(candidate_version "${PACKAGES[0]}")" ]]; then
  placer_log "apt lists missing: apt-get update"
  apt-get update -qq
fi

# As root, apt's download sandbox user cannot write into the clone; download as root outright.
apt_options=()
[[ $(id -u) -eq 0 ]] && apt_options=(-o APT::Sandbox::User=root)

downloaded=0 kept=0
for package in "${PACKAGES[@]}"; do
  version="$(candidate_version "$package")"
  if [[ -z "$version" ]]; then
    placer_log "error: apt knows no package '$package'"
    exit 1
  fi
  # apt-get download writes NAME_VERSION_ARCH.deb with the epoch's ':' as %3a.
  wanted=("${package}_${version//:/%3a}_"*.deb)
  if [[ -f "${wanted[0]}" ]]; then
    kept=$((kept + 1))
    continue
  fi
  rm -f "${package}_"*.deb
  apt-get download -qq "${apt_options[@]}" "$package"
  downloaded=$((downloaded + 1))
done

# Anything no longer in the list goes.
for deb in *.deb; do
  name="${deb%%_*}"
  if [[ " ${PACKAGES[*]} " != *" $name "* ]]; then
    placer_log "removing $deb (not in the list any more)"
    rm -f "$deb"
  fi
done

# What travels: name, version and checksum of every package, for the check's log.
for deb in *.deb; do
  printf '%s  %s  %s\n' "$(dpkg-deb -f "$deb" Package)" "$(dpkg-deb -f "$deb" Version)" \
    "$(sha256sum "$deb" | cut -c1-16)"
done >MANIFEST

total_bytes="$(du -cb ./*.deb | tail -1 | cut -f1)"
count="$(find . -maxdepth 1 -name '*.deb' | wc -l)"
placer_log "$DEBS_DIR: $count packages ($downloaded downloaded, $kept kept), $((total_bytes / 1024)) KiB"
# The working tree and the carried packages travel together, 64 MiB at most.
tree_bytes="$(cd "$PLACER_ROOT" && git ls-files -z --cached --others --exclude-standard |
  xargs -0 -r du -cb 2>/dev/null | awk '/\ttotal$/ { sum += $1 } END { print sum + 0 }')"
placer_log "with the working tree ($((tree_bytes / 1024)) KiB): $(((total_bytes + tree_bytes) / 1024)) KiB of 65536 KiB"
if ((total_bytes + tree_bytes > 48 * 1024 * 1024)); then
  placer_log "warning: over 48 MiB; a device call carries 64 MiB at most"
fi
