// Command faultline-plugin-pytorch is the PyTorch framework plugin: the variables torchrun
// reads (PET_*) and those of init_method="env://", and PyTorch's failure hints. The
// controller starts it; run by hand, it says so and exits.
package main

import (
	"github.com/faultline-dev/faultline/pkg/framework"
	"github.com/faultline-dev/faultline/pkg/version"
	"github.com/faultline-dev/faultline/plugins/pytorch/torchplugin"
)

func main() {
	framework.Serve(torchplugin.Plugin{Version: version.Version})
}
