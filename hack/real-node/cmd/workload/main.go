// Command workload is the real node's test pod program: it prints the
// Slingshot environment it was started with (from CDI) and the env file
// the agent published in its per-container directory, then waits for
// SIGTERM. Tests read the same values from /proc; the printout is for a
// person running `kubectl logs` on the demo node.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

// envFile is agent.ContainerDir + "/" + agent.EnvFileName.
const envFile = "/var/run/slingshot/slingshot.env"

func main() {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "SLINGSHOT_") {
			env = append(env, kv)
		}
	}
	sort.Strings(env)
	fmt.Println("environment:")
	for _, kv := range env {
		fmt.Println("  " + kv)
	}
	if b, err := os.ReadFile(envFile); err != nil {
		fmt.Printf("%s: %v\n", envFile, err)
	} else {
		fmt.Printf("%s:\n%s", envFile, b)
	}
	<-sigs
}
