package cniinstall

import (
	"context"
	"fmt"
	"log/slog"
	"os"
)

// Default CNI dirs, as containerd and CRI-O default them.
const (
	DefaultBinDir  = "/opt/cni/bin"
	DefaultConfDir = "/etc/cni/net.d"
)

// Options are the flags of `doorman install-cni`.
type Options struct {
	BinDir, ConfDir string
	// ConfigFile is the --config JSON file; empty means DefaultConfig.
	ConfigFile string
	// Binary is the doorman binary to install; empty means the running
	// executable.
	Binary string
	// Once makes one pass and returns, instead of watching (or, with
	// Uninstall, instead of staying up until ctx is done, as a DaemonSet's
	// container must). Uninstall removes doorman's entries instead (and
	// RemoveBinary its binary too). Check changes nothing and reports
	// whether the node is as Install (or Uninstall) leaves it.
	Once, Uninstall, RemoveBinary, Check bool
}

// ConfigError is a --config file that cannot be used; nothing was changed.
type ConfigError struct {
	File string
	Err  error
}

func (e *ConfigError) Error() string { return fmt.Sprintf("--config %s: %v", e.File, e.Err) }
func (e *ConfigError) Unwrap() error { return e.Err }

// LoadConfig reads and validates a --config file (see ValidateConfig).
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &ConfigError{path, err}
	}
	c, err := ValidateConfig(data)
	if err != nil {
		return nil, &ConfigError{path, err}
	}
	return c, nil
}

// Run is `doorman install-cni`: it validates the configuration before it
// touches anything, then installs (and watches until ctx is done, unless
// Once), uninstalls (and stays up until ctx is done, unless Once), or
// checks. log gets a line for each change.
func Run(ctx context.Context, o Options, log *slog.Logger) error {
	cfg := DefaultConfig()
	if o.ConfigFile != "" {
		var err error
		if cfg, err = LoadConfig(o.ConfigFile); err != nil {
			return err
		}
	}
	if o.BinDir == "" {
		o.BinDir = DefaultBinDir
	}
	if o.ConfDir == "" {
		o.ConfDir = DefaultConfDir
	}
	if o.Binary == "" && !o.Uninstall {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find the running doorman binary: %w", err)
		}
		o.Binary = exe
	}
	in := &Installer{BinDir: o.BinDir, ConfDir: o.ConfDir, Binary: o.Binary, Config: cfg, Log: log}
	switch {
	case o.Check && o.Uninstall:
		return in.CheckUninstalled()
	case o.Check:
		return in.Check()
	case o.Uninstall:
		if _, err := in.Uninstall(o.RemoveBinary); err != nil || o.Once {
			return err
		}
		// As a DaemonSet's container, stay up (and ready) until stopped.
		if log != nil {
			log.Info("uninstalled", "dir", o.ConfDir, "reason", "doorman's entries are removed; staying up until SIGTERM (--once exits instead)")
		}
		<-ctx.Done()
		return nil
	case o.Once:
		_, err := in.Install()
		return err
	default:
		return in.Watch(ctx)
	}
}
