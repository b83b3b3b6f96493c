# Model of oe-core's allarch class (see ../README.md): just before the recipe is finalised,
# PACKAGE_ARCH becomes "all"; setVar outside parsing removes the active overrides of it.
python edgegpu_model_allarch () {
    d.setVar("PACKAGE_ARCH", "all")
}
addhandler edgegpu_model_allarch
edgegpu_model_allarch[eventmask] = "bb.event.RecipePreFinalise"
