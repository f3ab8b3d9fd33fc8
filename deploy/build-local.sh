#!/usr/bin/env bash
# Build the image without a container registry or a Docker daemon: a Debian bookworm base made with
# debootstrap stands in for python:3.11-slim-bookworm, and buildah builds the Dockerfile on it.
# Needs root, debootstrap and buildah, and the Debian mirror and PyPI (or the indexes given below).
#
#   deploy/build-local.sh                          # the base image (once), then localhost/mediaindex:latest
#   TORCH_WHEELS=/srv/wheels deploy/build-local.sh # torch from a folder of wheels (e.g. `pip download
#                                                  #   torch==2.13.0 --no-deps --index-url ...whl/cpu -d DIR`),
#                                                  #   its dependencies from PyPI
#   deploy/build-local.sh --build-arg VARIANT=gpu  # further arguments go to `buildah bud`
#
# Settings (environment): IMAGE, BASE (the base image's name), MIRROR (Debian), STORAGE_DRIVER (buildah's,
# default vfs, which works everywhere but keeps whole copies), TORCH_WHEELS, TORCH_INDEX_URL, TORCH_VERSION.
# Run the result with `buildah run` or export it (`buildah push IMAGE docker-archive:mediaindex.tar`).
set -euo pipefail

IMAGE=${IMAGE:-localhost/mediaindex:latest}
BASE=${BASE:-localhost/python:3.11-slim-bookworm-local}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
STORAGE_DRIVER=${STORAGE_DRIVER:-vfs}
REPO=$(cd "$(dirname "$0")/.." && pwd)
buildah() { command buildah --storage-driver "$STORAGE_DRIVER" "$@"; }

[ "$(id -u)" = 0 ] || { echo "run as root (debootstrap, chroot and buildah's storage need it)" >&2; exit 1; }
for tool in debootstrap buildah; do
  command -v "$tool" >/dev/null || { echo "$tool is missing (apt-get install $tool)" >&2; exit 1; }
done

work=""
cleanup() { [ -z "$work" ] || { umount "$work/rootfs/proc" 2>/dev/null || true; rm -rf "$work"; }; }
trap cleanup EXIT

make_base() {
  local rootfs ctr mnt
  work=$(mktemp -d)
  rootfs=$work/rootfs
  # What python:3.11-slim-bookworm holds, from Debian's packages: CA certificates, netbase, tzdata and
  # Python 3.11 (Debian's 3.11.2 in /usr/bin, where the official image builds the latest 3.11 in /usr/local).
  debootstrap --variant=minbase --include=ca-certificates,netbase,tzdata,python3,python3-venv \
    bookworm "$rootfs" "$MIRROR"
  rm -f "$rootfs/etc/apt/sources.list"
  cat >"$rootfs/etc/apt/sources.list.d/debian.sources" <<'EOF'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  # The slim images' conventions: no documentation or translations, no apt caches left in layers.
  cat >"$rootfs/etc/dpkg/dpkg.cfg.d/docker" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
EOF
  cat >"$rootfs/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
  echo 'Acquire::Languages "none";' >"$rootfs/etc/apt/apt.conf.d/docker-no-languages"
  cp /etc/resolv.conf "$rootfs/etc/resolv.conf"
  mount -t proc proc "$rootfs/proc"
  local in_root=(chroot "$rootfs" env -i PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin
                 HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive PIP_NO_CACHE_DIR=1)
  "${in_root[@]}" sh -c 'apt-get update && apt-get -y upgrade && apt-get clean'   # security updates
  # pip and setuptools into /usr/local as in the official image, from the wheels Debian ships (Debian
  # disables ensurepip for its Python); without the EXTERNALLY-MANAGED marker, as there, `pip install`
  # installs into /usr/local/lib/python3.11/dist-packages.
  rm -f "$rootfs"/usr/lib/python3.*/EXTERNALLY-MANAGED
  "${in_root[@]}" sh -c 'cd /usr/share/python-wheels && set -- pip-*.whl && python3 "$1/pip" install \
    --no-index --root-user-action=ignore --disable-pip-version-check pip-*.whl setuptools-*.whl'
  ln -sf /usr/bin/python3 "$rootfs/usr/local/bin/python"
  umount "$rootfs/proc"
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/* "$rootfs"/var/log/* "$rootfs"/root/.cache \
    "$rootfs"/tmp/* "$rootfs/etc/hostname"
  : >"$rootfs/etc/resolv.conf"

  ctr=$(buildah from scratch)
  mnt=$(buildah mount "$ctr")
  tar -C "$rootfs" --numeric-owner -cf - . | tar -C "$mnt" --numeric-owner -xpf -
  buildah umount "$ctr"
  buildah config --os linux --arch amd64 --cmd '["python3"]' \
    --env PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin --env LANG=C.UTF-8 \
    --env PYTHON_VERSION="$(chroot "$rootfs" python3 -c 'import platform; print(platform.python_version())')" \
    "$ctr"
  buildah commit --rm "$ctr" "$BASE"
}

if buildah inspect --type image "$BASE" >/dev/null 2>&1; then
  echo "base image $BASE exists (remove it with: buildah --storage-driver $STORAGE_DRIVER rmi $BASE)"
else
  make_base
fi

args=(--build-arg BASE_IMAGE="$BASE")
[ -z "${TORCH_VERSION:-}" ] || args+=(--build-arg TORCH_VERSION="$TORCH_VERSION")
if [ -n "${TORCH_WHEELS:-}" ]; then
  args+=(--volume "$(cd "$TORCH_WHEELS" && pwd):/wheels:ro" --build-arg PIP_FIND_LINKS=/wheels
         --build-arg TORCH_INDEX_URL="${TORCH_INDEX_URL:-https://pypi.org/simple}")
elif [ -n "${TORCH_INDEX_URL:-}" ]; then
  args+=(--build-arg TORCH_INDEX_URL="$TORCH_INDEX_URL")
fi
cd "$REPO"
buildah bud --isolation chroot --pull-never "${args[@]}" "$@" -t "$IMAGE" .
buildah images "$IMAGE"
