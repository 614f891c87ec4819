package main

import (
	"strings"
	"testing"
)

func TestLintFindsProblems(t *testing.T) {
	problems, err := Lint(t.Context(), "testdata/ctx/Dockerfile", "testdata/ctx/.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(problems, "\n")
	for _, want := range []string{
		"StageNameCasing", "ConsistentInstructionCasing", "SecretsUsedInArgOrEnv", "UndefinedVar", "JSONArgsRecommended",
		"ignored.txt is excluded by .dockerignore", "missing.txt is not in the build context",
		"without CGO_ENABLED=0", "ubuntu names no tag", "controller runs as root", "no agent target",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("no problem mentions %q; got:\n%s", want, all)
		}
	}
}

func TestLintProjectDockerfile(t *testing.T) {
	problems, err := Lint(t.Context(), "../../../Dockerfile", "../../../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) > 0 {
		t.Errorf("the project's Dockerfile has problems:\n%s", strings.Join(problems, "\n"))
	}
}
