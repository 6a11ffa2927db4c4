package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"go.yaml.in/yaml/v3"

	"github.com/llmd/llmd/daemon"
)

// fileConfig is llmd's configuration file (--config, YAML): what does not
// fit a flag. Unknown keys are errors, so a typo does not go unnoticed.
//
//	currency: USD
//	gpu_hour_price: 2.49        # one GPU for one hour, for the cost per 1M output tokens
//	prices:                     # per million tokens, per model
//	  sim/small: {input: 0.10, cached: 0.05, output: 0.40}
type fileConfig struct {
	Currency     string                  `yaml:"currency"`
	GPUHourPrice float64                 `yaml:"gpu_hour_price"`
	Prices       map[string]daemon.Price `yaml:"prices"`
}

// readConfigFile reads path into cfg.
func readConfigFile(path string, cfg *daemon.Config) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	var fc fileConfig
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&fc); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("config file %s: %w", path, err)
	}
	if fc.Currency != "" {
		cfg.Currency = fc.Currency
	}
	cfg.GPUHourPrice = fc.GPUHourPrice
	cfg.Prices = fc.Prices
	return nil
}
