# Configures the container runtimes of an image at build time by running
# `edgegpu-node-setup apply` against the image root, for read-only root filesystems where the
# boot-time edgegpu-node-setup.service cannot write (it skips itself there).
#
# Use in an image recipe (inherit edgegpu_node_setup_rootfs) or in local.conf:
#   IMAGE_CLASSES += "edgegpu_node_setup_rootfs"
# The image must contain the container runtime and the NVIDIA runtime node-setup is to wire
# up; apply fails (and with it do_rootfs) when there is nothing it can configure.

# Extra global options, e.g. "--mode k3s-default-runtime".
EDGEGPU_NODE_SETUP_ROOTFS_ARGS ??= ""

# Any task depending on a populate_sysroot gets the native tool staged into its sysroot.
do_rootfs[depends] += "edgegpu-native:do_populate_sysroot"

# "func; " works both with the ;-separated lists (up to mickledore) and the
# whitespace-separated ones (nanbield and later).
ROOTFS_POSTPROCESS_COMMAND += "edgegpu_node_setup_rootfs; "
edgegpu_node_setup_rootfs[doc] = "Runs edgegpu-node-setup apply against IMAGE_ROOTFS"

edgegpu_node_setup_rootfs () {
    # --no-restart: nothing runs inside the image being built.
    ${STAGING_BINDIR_NATIVE}/edgegpu-node-setup --root ${IMAGE_ROOTFS} --no-restart \
        ${EDGEGPU_NODE_SETUP_ROOTFS_ARGS} apply
}
