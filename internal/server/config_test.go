package server

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestValidateSpeaksConfig: Validate names Config's fields, so that any front end (the
// command line, a library user) can word the error its own way.
func TestValidateSpeaksConfig(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(*Config)
		field string
		msg   string
	}{
		{"short admin secret", func(c *Config) { c.AdminSecret = "short" }, "AdminSecret", "at least 32"},
		{"postgres without url", func(c *Config) { c.Engine = "postgres" }, "PostgresURL", "required with Engine postgres"},
		{"url without postgres", func(c *Config) { c.PostgresURL = "postgres://x/y" }, "PostgresURL", "only used with Engine postgres"},
		{"batch wait without postgres", func(c *Config) { c.PostgresBatchWait = time.Millisecond }, "PostgresMaxBatch", "PostgresBatchWait"},
		{"negative batch", func(c *Config) { c.Engine, c.PostgresURL, c.PostgresMaxBatch = "postgres", "postgres://x/y", -1 }, "PostgresMaxBatch", "negative"},
		{"relaxed postgres", func(c *Config) { c.Engine, c.PostgresURL, c.Relaxed = "postgres", "postgres://x/y", true }, "Relaxed", "embedded"},
		{"bus auth without bus", func(c *Config) { c.BusAuth.CredsFile = "/x.creds" }, "BusAuth", "BusURL"},
		{"push content", func(c *Config) { c.Push.Content = "all" }, "Push.Content", "none or preview"},
		{"negative group retention", func(c *Config) { c.Tier.GroupRetentionMin = -time.Hour }, "Tier", "GroupRetentionMin and GroupRetentionMax must not be negative"},
		{"group retention min above max", func(c *Config) { c.Tier.GroupRetentionMax = time.Minute }, "Tier", "GroupRetentionMin (1h0m0s) must not be above GroupRetentionMax (1m0s)"},
		{"apns half configured", func(c *Config) { c.Push.APNsKeyFile = "k.p8" }, "Push.APNsKeyFile", "Push.APNsTopic"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig(t.TempDir())
			tc.edit(&c)
			err := c.Validate()
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || !strings.Contains(fe.Error(), tc.msg) {
				t.Fatalf("Validate: %v; want a FieldError on %s containing %q", err, tc.field, tc.msg)
			}
			if strings.Contains(err.Error(), "--") {
				t.Errorf("Validate words its error as a flag: %q", err)
			}
		})
	}
	if err := DefaultConfig(t.TempDir()).Validate(); err != nil {
		t.Fatalf("the defaults do not validate: %v", err)
	}
}
