package otlplog

import (
	"time"

	"github.com/doorman-net/doorman/spec"
)

// Defaults for the zero values of Config.
const (
	// DefaultQueueSize bounds the records held for export when
	// Config.QueueSize is 0. The SDK allocates the whole queue up front,
	// about 600 bytes a record: 1024 is some 600 KiB per proxy, and ten
	// seconds of 100 connections a second while the collector stalls.
	DefaultQueueSize = 1024
	// DefaultExportTimeout bounds one export when Config.ExportTimeout is 0.
	DefaultExportTimeout = 5 * time.Second
	// DefaultReportInterval is how often dropped records are reported when
	// Config.ReportInterval is 0.
	DefaultReportInterval = 30 * time.Second
)

// Config says where and how records are exported. The zero value exports
// nothing.
type Config struct {
	// OTLP is the collector and what is sent to it: the export settings
	// of a sandbox (see spec.OTLP). An empty Endpoint disables export;
	// a QueueSize of 0 means DefaultQueueSize.
	spec.OTLP
	// Sandbox is the sandbox id, exported as the resource attribute
	// doorman.sandbox.
	Sandbox string
	// ExportTimeout bounds one export request, retries included. 0 means
	// DefaultExportTimeout.
	ExportTimeout time.Duration
	// ReportInterval is how often a line with message "otlp" reports
	// dropped records, when there are new ones. 0 means
	// DefaultReportInterval.
	ReportInterval time.Duration
}

// withDefaults returns c with its zero fields set to the defaults.
func (c Config) withDefaults() Config {
	if c.QueueSize == 0 {
		c.QueueSize = DefaultQueueSize
	}
	if c.ExportTimeout == 0 {
		c.ExportTimeout = DefaultExportTimeout
	}
	if c.ReportInterval == 0 {
		c.ReportInterval = DefaultReportInterval
	}
	return c
}

// Validate reports the first setting of c that NewHandler would refuse,
// naming it (a *spec.SettingError): for callers that want to fail before
// a proxy is started. A c without Endpoint is valid.
func (c Config) Validate() error {
	if c.Endpoint == "" {
		return nil
	}
	c = c.withDefaults()
	if c.ExportTimeout < 0 {
		return &spec.SettingError{Key: "exportTimeout", Value: c.ExportTimeout.String(), Why: "must not be negative"}
	}
	if c.ReportInterval < 0 {
		return &spec.SettingError{Key: "reportInterval", Value: c.ReportInterval.String(), Why: "must not be negative"}
	}
	return c.OTLP.Validate()
}
