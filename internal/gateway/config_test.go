package gateway

import (
	"math"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	tests := []struct {
		name  string
		mod   func(*Config)
		valid bool
	}{
		{"limits off", func(c *Config) { c.SendRate, c.SendBurst, c.RequestRate, c.RequestBurst = 0, 0, 0, 0 }, true},
		{"no heartbeat", func(c *Config) { c.HeartbeatInterval = 0 }, false},
		{"idle below heartbeat", func(c *Config) { c.IdleTimeout = 20 * time.Second }, false},
		{"no queue", func(c *Config) { c.SendQueue = 0 }, false},
		{"no write timeout", func(c *Config) { c.WriteTimeout = 0 }, false},
		{"no body", func(c *Config) { c.MaxBodyBytes = 0 }, false},
		{"no body timeout", func(c *Config) { c.BodyTimeout = 0 }, false},
		{"no long-polls", func(c *Config) { c.LongPollsPerUser = 0 }, false},
		{"negative rate", func(c *Config) { c.SendRate = -1 }, false},
		{"NaN rate", func(c *Config) { c.RequestRate = math.NaN() }, false},
		{"rate without burst", func(c *Config) { c.SendBurst = 0 }, false},
		{"fanout without burst", func(c *Config) { c.FanoutBurst = 0 }, false},
		{"fanout off", func(c *Config) { c.FanoutRate, c.FanoutBurst = 0, 0 }, true},
		{"negative change interval", func(c *Config) { c.ConvChangeEvery = -time.Second }, false},
		{"change limit without burst", func(c *Config) { c.ConvChangeBurst = 0 }, false},
		{"creation limit without burst", func(c *Config) { c.ConvCreateBurst = 0 }, false},
		{"conversation limits off", func(c *Config) {
			c.ConvChangeEvery, c.ConvCreateEvery, c.ConvChangeBurst, c.ConvCreateBurst = 0, 0, 0, 0
		}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.mod(&c)
			if err := c.Validate(); (err == nil) != tt.valid {
				t.Fatalf("Validate() = %v, want valid %v", err, tt.valid)
			}
		})
	}
}
