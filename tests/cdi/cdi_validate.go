// cdi_validate: gpubind's CDI specs judged by the CDI reference library
// (github.com/container-orchestrated-devices/container-device-interface
// 0.5.2, Debian 12's golang-github-container-orchestrated-devices-container-
// device-interface-dev; podman 4.3 reads specs with a 0.5 release of it).
//
//	cdi_validate [FILE...] [--inject DEV[,DEV...] --dirs DIR[,DIR...]]
//
// Every FILE is read as the library reads a spec (cdi.ReadSpec: strict
// parsing, the version, kind and device names, every containerEdits, and
// the library's builtin JSON schema), printing one line each:
//
//	ok <kind> <n> devices <file>
//	error <file>: <message>
//
// With --inject, a cache over the DIRs (as an engine's, the first DIR the
// lowest priority) injects the fully qualified devices into an empty OCI
// spec (cdi.Cache.InjectDevices), printing what the spec then holds, a line
// each, in the spec's order:
//
//	device <path> <type> <major>:<minor>
//	mount <containerPath> <hostPath> <options, comma-separated>
//	env <NAME=value>
//	hook <createRuntime|...> <path>
//
// Exits 0 when every file was ok and the injection succeeded, 1 otherwise,
// 2 on bad arguments. Built with the distribution's GOPATH (no modules, no
// network): GO111MODULE=off GOPATH=/usr/share/gocode go build.
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/container-orchestrated-devices/container-device-interface/pkg/cdi"
	"github.com/container-orchestrated-devices/container-device-interface/pkg/cdi/validate"
	"github.com/container-orchestrated-devices/container-device-interface/schema"
	oci "github.com/opencontainers/runtime-spec/specs-go"
)

func usage(why string) {
	fmt.Fprintf(os.Stderr, "cdi_validate: %s\nusage: cdi_validate [FILE...] [--inject DEV[,DEV...] --dirs DIR[,DIR...]]\n", why)
	os.Exit(2)
}

func split(list string) []string {
	var out []string
	for _, s := range strings.Split(list, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// The builtin schema, which the library replaces silently by one accepting
// everything when it cannot load it: refused then, so that a check cannot
// pass for want of a schema.
func builtinSchema() (*schema.Schema, error) {
	s := schema.BuiltinSchema()
	if err := s.ValidateData([]byte(`{"kind": 1}`)); err == nil {
		return nil, fmt.Errorf("the library's builtin JSON schema did not load")
	}
	return s, nil
}

func validateFiles(files []string) bool {
	ok := true
	for _, file := range files {
		spec, err := cdi.ReadSpec(file, 0)
		if err != nil {
			fmt.Printf("error %s: %v\n", file, err)
			ok = false
			continue
		}
		fmt.Printf("ok %s %d devices %s\n", spec.Kind, len(spec.Devices), file)
	}
	return ok
}

func inject(devices, dirs []string) error {
	// The library skips a directory that is not there: named here instead.
	for _, dir := range dirs {
		if st, err := os.Stat(dir); err != nil {
			return err
		} else if !st.IsDir() {
			return fmt.Errorf("%s is not a directory", dir)
		}
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(dirs...), cdi.WithAutoRefresh(false))
	if err != nil {
		return fmt.Errorf("CDI cache over %s: %v", strings.Join(dirs, ", "), err)
	}
	// A spec the cache could not read is an error too, even when the devices
	// asked for are in others.
	if err := cache.Refresh(); err != nil {
		return fmt.Errorf("CDI cache over %s: %v", strings.Join(dirs, ", "), err)
	}
	spec := &oci.Spec{Version: oci.Version, Process: &oci.Process{}, Linux: &oci.Linux{}}
	if unresolved, err := cache.InjectDevices(spec, devices...); err != nil {
		if len(unresolved) > 0 {
			return fmt.Errorf("%v (unresolved: %s; the cache has: %s)", err,
				strings.Join(unresolved, ", "), strings.Join(cache.ListDevices(), ", "))
		}
		return err
	}
	for _, d := range spec.Linux.Devices {
		fmt.Printf("device %s %s %d:%d\n", d.Path, d.Type, d.Major, d.Minor)
	}
	for _, m := range spec.Mounts {
		fmt.Printf("mount %s %s %s\n", m.Destination, m.Source, strings.Join(m.Options, ","))
	}
	if spec.Process != nil {
		for _, e := range spec.Process.Env {
			fmt.Printf("env %s\n", e)
		}
	}
	if h := spec.Hooks; h != nil {
		for _, set := range []struct {
			name  string
			hooks []oci.Hook
		}{{"prestart", h.Prestart}, {"createRuntime", h.CreateRuntime},
			{"createContainer", h.CreateContainer}, {"startContainer", h.StartContainer},
			{"poststart", h.Poststart}, {"poststop", h.Poststop}} {
			for _, hook := range set.hooks {
				fmt.Printf("hook %s %s\n", set.name, hook.Path)
			}
		}
	}
	return nil
}

func main() {
	var files, devices, dirs []string
	injecting := false
	args := os.Args[1:]
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "--inject" || a == "--dirs":
			if i+1 >= len(args) {
				usage(a + " needs a value")
			}
			i++
			if a == "--inject" {
				injecting = true
				devices = append(devices, split(args[i])...)
			} else {
				dirs = append(dirs, split(args[i])...)
			}
		case strings.HasPrefix(a, "--inject="):
			injecting = true
			devices = append(devices, split(strings.TrimPrefix(a, "--inject="))...)
		case strings.HasPrefix(a, "--dirs="):
			dirs = append(dirs, split(strings.TrimPrefix(a, "--dirs="))...)
		case a == "--":
			files = append(files, args[i+1:]...)
			i = len(args)
		case strings.HasPrefix(a, "-"):
			usage("unknown option " + a)
		default:
			files = append(files, a)
		}
	}
	if injecting && (len(devices) == 0 || len(dirs) == 0) {
		usage("--inject needs devices and --dirs")
	}
	if !injecting && len(dirs) > 0 {
		usage("--dirs without --inject")
	}
	if len(files) == 0 && !injecting {
		usage("nothing to do")
	}

	s, err := builtinSchema()
	if err != nil {
		fmt.Fprintf(os.Stderr, "cdi_validate: %v\n", err)
		os.Exit(1)
	}
	cdi.SetSpecValidator(validate.WithSchema(s))

	ok := validateFiles(files)
	if injecting {
		if err := inject(devices, dirs); err != nil {
			fmt.Printf("error inject %s: %v\n", strings.Join(devices, ","), err)
			ok = false
		}
	}
	if !ok {
		os.Exit(1)
	}
}
