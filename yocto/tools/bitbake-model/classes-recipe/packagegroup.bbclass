# Model of oe-core's packagegroup class (see ../README.md): packagegroups are allarch unless
# PACKAGE_ARCH names another arch *by the time this class is inherited*.
PACKAGE_ARCH ?= "all"
# Expanded now, overrides applied: what a recipe sets after the inherit line is not seen.
PACKAGE_ARCH_EXPANDED := "${PACKAGE_ARCH}"
inherit_defer ${@'allarch' if d.getVar('PACKAGE_ARCH_EXPANDED') == 'all' else ''}
