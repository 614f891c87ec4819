package dra

import "github.com/slingshot-k8s/slingshot/internal/draclaim"

// A claim's configuration is the driver's API, which the controller
// reads too: package draclaim holds it, these are its names here.
const (
	ConfigAPIVersion = draclaim.ConfigAPIVersion
	ConfigKind       = draclaim.ConfigKind
)

// ClaimConfig is a claim's configuration for this driver.
type ClaimConfig = draclaim.ClaimConfig
