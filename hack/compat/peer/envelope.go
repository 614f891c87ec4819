package main

import (
	"encoding/json"
	"fmt"
)

// envelopeData returns the data of a checkpoint file.
func envelopeData(b []byte) (json.RawMessage, error) {
	var env struct {
		Data json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(b, &env); err != nil {
		return nil, fmt.Errorf("read envelope: %w", err)
	}
	return env.Data, nil
}
