#!/bin/bash
# uverbs_node.sh CMD [ARGS...]: runs CMD where softverbs' device has its
# character device node, /dev/infiniband/uverbs_softverbs0.
#
# UCX lists an InfiniBand device only if /dev/infiniband/<dev_name> is a
# character device the process may read and write (it stats and access()es
# the node, never opens it); the kernel creates that node for a real HCA.
# softverbs has no kernel part, so CMD runs in a private mount namespace
# whose /dev is an overlay of the real one plus that node: a symlink to
# /dev/null (a character device anyone may read and write). Nothing outside
# the namespace changes. Root uses a mount namespace; anyone else a user
# namespace mapping them to root.
#
# Exit status: CMD's; 125 if the namespace cannot be made (reason on stderr).
set -uo pipefail
[ $# -ge 1 ] || { echo "usage: uverbs_node.sh CMD [ARGS...]" >&2; exit 2; }
node_dir=$(mktemp -d /tmp/svnode.XXXXXX) || exit 125
trap 'rm -rf "$node_dir"' EXIT
mkdir -p "$node_dir/upper" "$node_dir/work"

# The script the namespace runs: mount the overlay, add the node, run CMD.
# shellcheck disable=SC2016  # expanded inside the namespace
inner='mount -t overlay overlay -o "lowerdir=/dev,upperdir=$0/upper,workdir=$0/work" /dev &&
  mkdir -p /dev/infiniband && ln -sf /dev/null /dev/infiniband/uverbs_softverbs0 || exit 125
  exec "$@"'

if [ "$(id -u)" = 0 ] && unshare --mount --propagation private true 2>/dev/null; then
  unshare --mount --propagation private bash -c "$inner" "$node_dir" "$@"
elif unshare --user --map-root-user --mount true 2>/dev/null; then
  unshare --user --map-root-user --mount bash -c "$inner" "$node_dir" "$@"
else
  echo "uverbs_node.sh: no mount namespace available (unshare failed)" >&2
  exit 125
fi
