package main

import (
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// The leader election's own rate limit: it makes about one request per
// retry period (1 s), and nothing else may spend its tokens.
const electionQPS, electionBurst = 5, 10

// kubeClients are the controller's Kubernetes clients. Each has its own
// rate limiter (client-go gives every clientset built from a config
// without one a token bucket of its own), so that a burst of one kind of
// call cannot delay another: the TokenReviews of every agent reconnecting
// at once would otherwise queue the leader's Lease renewals behind them,
// and a leader that cannot renew within its deadline steps down.
type kubeClients struct {
	// main watches nodes (the config's own limit, kubeConfig's).
	main kubernetes.Interface
	// review makes the agents' TokenReviews only (--token-review-qps,
	// --token-review-burst).
	review kubernetes.Interface
	// election reads and renews the leader election's Lease only.
	election kubernetes.Interface
}

func newKubeClients(rc *rest.Config, c *Config) (kubeClients, error) {
	var kc kubeClients
	var err error
	if kc.main, err = kubernetes.NewForConfig(rc); err != nil {
		return kc, fmt.Errorf("kubernetes client: %w", err)
	}
	if kc.review, err = limitedClient(rc, "token-review", float32(c.TokenReviewQPS), c.TokenReviewBurst); err != nil {
		return kc, err
	}
	if kc.election, err = limitedClient(rc, "leader-election", electionQPS, electionBurst); err != nil {
		return kc, err
	}
	return kc, nil
}

// limitedClient returns a clientset of rc with a rate limiter of its own.
func limitedClient(rc *rest.Config, name string, qps float32, burst int) (kubernetes.Interface, error) {
	cfg := rest.CopyConfig(rc)
	cfg.QPS, cfg.Burst, cfg.RateLimiter = qps, burst, nil
	cfg.UserAgent = rc.UserAgent + "/" + name
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client (%s): %w", name, err)
	}
	return cs, nil
}
