// Renders a k3s containerd template the way k3s does (pkg/agent/templates:
// ParseTemplateFromConfig): Go's text/template, the user's template parsed first and the
// stock template added under the name "base", executed with k3s's ContainerdConfig data.
// The data's shape follows k3s's types (field names the templates use); values come from
// a JSON file written by the test.
//
// Usage: k3s_render TEMPLATE BASE DATA.json   (rendered config on stdout)
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"text/template"
)

type ContainerdRuntimeConfig struct {
	RuntimeType string
	BinaryName  string
}

type Containerd struct {
	Address       string
	Log           string
	Root          string
	State         string
	Config        string
	Opt           string
	Template      string
	BlockIOConfig string
	RDTConfig     string
	Registry      string
	SELinux       bool
	Debug         bool
}

type AgentConfig struct {
	Snapshotter        string
	PauseImage         string
	CNIBinDir          string
	CNIConfDir         string
	ImageServiceSocket string
}

type Node struct {
	SELinux        bool
	NoFlannel      bool
	DefaultRuntime string
	Containerd     Containerd
	AgentConfig    AgentConfig
}

type Mirror struct {
	Endpoints []string
	Rewrites  map[string]string
}

type AuthConfig struct {
	Username      string
	Password      string
	Auth          string
	IdentityToken string
}

type TLSConfig struct {
	CAFile             string
	CertFile           string
	KeyFile            string
	InsecureSkipVerify bool
}

type RegistryConfig struct {
	Auth *AuthConfig
	TLS  *TLSConfig
}

type Registry struct {
	Mirrors map[string]Mirror
	Configs map[string]RegistryConfig
}

type ContainerdConfig struct {
	NodeConfig            *Node
	DisableCgroup         bool
	SystemdCgroup         bool
	IsRunningInUserNS     bool
	EnableUnprivileged    bool
	NoDefaultEndpoint     bool
	NonrootDevices        bool
	PrivateRegistryConfig *Registry
	ExtraRuntimes         map[string]ContainerdRuntimeConfig
	Program               string
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

func main() {
	if len(os.Args) != 4 {
		fail("usage: k3s_render TEMPLATE BASE DATA.json")
	}
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			fail("%v", err)
		}
		return string(b)
	}
	var data ContainerdConfig
	if err := json.Unmarshal([]byte(read(os.Args[3])), &data); err != nil {
		fail("data: %v", err)
	}
	t, err := template.New("compiled_template").Parse(read(os.Args[1]))
	if err != nil {
		fail("template: %v", err)
	}
	if _, err := t.New("base").Parse(read(os.Args[2])); err != nil {
		fail("base: %v", err)
	}
	if err := t.Execute(os.Stdout, data); err != nil {
		fail("execute: %v", err)
	}
}
