// Package config is the node agent's YAML configuration: resource names,
// sharing, traffic classes, service resource limits, membership policy,
// cleanup and pod-watch settings, and the GPU machine types.
//
// [Parse] is pure and strict: unknown fields, bad values and contradictions
// are errors that name the field, so a bad file is refused as a whole and
// the agent keeps the configuration it had (see [Watcher]).
package config
