package health

import (
	"errors"
	"testing"
	"time"
)

func TestJudge(t *testing.T) {
	up := reading{linkUp: true, rhRunning: true, hasNetDev: true, netDev: "hsn0", operState: "up", limit: 10, window: time.Minute}
	with := func(f func(r *reading)) reading { r := up; f(&r); return r }
	tests := []struct {
		name        string
		in          reading
		wantHealthy bool
		wantProblem string
	}{
		{"all good", up, true, ""},
		{"no netdev known, operstate ignored", with(func(r *reading) { r.hasNetDev = false; r.operState = "" }), true, ""},
		{"link down", with(func(r *reading) { r.linkUp = false }), false, "link down"},
		{"link unreadable", with(func(r *reading) { r.linkErr = errors.New("gone") }), false, "link state unknown: gone"},
		{"retry handler stopped", with(func(r *reading) { r.rhRunning = false }), false, "retry handler not running"},
		{"retry handler unreadable", with(func(r *reading) { r.rhErr = errors.New("gone") }), false, "retry handler state unknown: gone"},
		{"netdev down", with(func(r *reading) { r.operState = "down" }), false, "netdev hsn0 down"},
		{"netdev dormant", with(func(r *reading) { r.operState = "dormant" }), false, "netdev hsn0 dormant"},
		{"netdev unreadable", with(func(r *reading) { r.operErr = errors.New("gone") }), false, "netdev state unknown: gone"},
		{"hardware error burst", with(func(r *reading) { r.burst = true }), false, "more than 10 hardware errors within 1m0s"},
		{
			"everything wrong",
			with(func(r *reading) { r.linkUp, r.rhRunning, r.operState, r.burst = false, false, "lowerlayerdown", true }),
			false,
			"link down; retry handler not running; netdev hsn0 lowerlayerdown; more than 10 hardware errors within 1m0s",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			healthy, problem := judge(tt.in)
			if healthy != tt.wantHealthy || problem != tt.wantProblem {
				t.Fatalf("judge = %v, %q; want %v, %q", healthy, problem, tt.wantHealthy, tt.wantProblem)
			}
		})
	}
}

func TestSameStateIgnoresCounters(t *testing.T) {
	a := Status{Healthy: true, LinkUp: true, HWErrors: 1, NetErrors: NetErrors{RXErrors: 3}}
	b := a
	b.HWErrors, b.NetErrors.RXErrors, b.NetErrors.CarrierChanges = 9, 4, 2
	if !sameState(a, b) {
		t.Fatal("statuses differing in counters only are not the same")
	}
	b.SpeedMbps = 100000
	if sameState(a, b) {
		t.Fatal("statuses differing in speed are the same")
	}
}
