// Validates CDI spec files with the CDI project's own Go library
// (github.com/container-orchestrated-devices/container-device-interface, the code container
// runtimes vendor to load specs): its JSON schema (schema/schema.json, defs.json) on the raw
// document, then cdi.ReadSpec — strict YAML/JSON parsing (unknown fields and duplicate keys
// are errors), the known cdiVersions, vendor, class and device-name rules, non-empty device
// edits, valid device nodes, mounts and hooks.
//
// Usage:
//
//	cdi_validate FILE...                 one line per file: "FILE: valid" or "FILE: INVALID: why";
//	                                     exit 1 if any file is invalid
//	cdi_validate -resolve DIRS NAME...   load the comma-separated spec directories DIRS as a runtime
//	                                     does (later directories take precedence) and print each
//	                                     loading error ("ERROR: …", e.g. a device two specs of one
//	                                     directory both define), then "NAME: resolved from FILE" or
//	                                     "NAME: unresolvable" for each fully qualified device name
//	                                     (vendor.com/class=name)
//
// Built by node-setup's tests against Debian's
// golang-github-container-orchestrated-devices-container-device-interface-dev (GOPATH mode,
// no network).
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/container-orchestrated-devices/container-device-interface/pkg/cdi"
	"github.com/container-orchestrated-devices/container-device-interface/pkg/cdi/validate"
	"github.com/container-orchestrated-devices/container-device-interface/schema"
)

func main() {
	builtin := schema.BuiltinSchema()
	// BuiltinSchema falls back to a schema that accepts anything when the embedded one does
	// not load: make sure the real one is in use (it requires cdiVersion, kind and devices).
	if builtin.ValidateData([]byte("{}")) == nil {
		fmt.Fprintln(os.Stderr, "the CDI library's builtin JSON schema did not load")
		os.Exit(2)
	}
	cdi.SetSpecValidator(validate.WithSchema(builtin))
	args := os.Args[1:]
	if len(args) >= 1 && args[0] == "-resolve" {
		if len(args) < 2 {
			fmt.Fprintln(os.Stderr, "usage: cdi_validate -resolve DIRS NAME...")
			os.Exit(2)
		}
		resolve(args[1], args[2:])
		return
	}
	bad := 0
	for _, path := range args {
		err := builtin.ValidateFile(path)
		if err == nil {
			_, err = cdi.ReadSpec(path, 0)
		}
		if err != nil {
			bad++
			fmt.Printf("%s: INVALID: %s\n", path, strings.ReplaceAll(err.Error(), "\n", " "))
		} else {
			fmt.Printf("%s: valid\n", path)
		}
	}
	if bad > 0 {
		os.Exit(1)
	}
}

func resolve(dirs string, names []string) {
	cache, err := cdi.NewCache(cdi.WithSpecDirs(strings.Split(dirs, ",")...), cdi.WithAutoRefresh(false))
	if cache == nil {
		fmt.Fprintln(os.Stderr, "cannot create the CDI cache:", err)
		os.Exit(2)
	}
	for path, errs := range cache.GetErrors() {
		for _, e := range errs {
			fmt.Printf("ERROR: %s: %s\n", path, strings.ReplaceAll(e.Error(), "\n", " "))
		}
	}
	for _, name := range names {
		if device := cache.GetDevice(name); device != nil {
			fmt.Printf("%s: resolved from %s\n", name, device.GetSpec().GetPath())
		} else {
			fmt.Printf("%s: unresolvable\n", name)
		}
	}
}
