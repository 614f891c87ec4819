package main

import (
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
)

// agent.checkpointFormat: the agent is told the format it writes, 3 (what
// release 0.2.0 reads) unless the values say 4, which the chart renders
// only with the acknowledgement that a rollback to 0.2.0 then needs the
// agents back on 3 first; every other value is refused. Numbers come from
// a values file (float64), --set (int64) or --set-string (a string).
func TestRenderCheckpointFormat(t *testing.T) {
	agent := func(kv ...any) map[string]any {
		a := map[string]any{}
		for i := 0; i+1 < len(kv); i += 2 {
			a[kv[i].(string)] = kv[i+1]
		}
		return map[string]any{"agent": a}
	}
	for name, tc := range map[string]struct {
		values map[string]any
		want   string
	}{
		"default":                 {nil, "--checkpoint-format=3"},
		"3 from a file":           {agent("checkpointFormat", float64(3)), "--checkpoint-format=3"},
		"4 acknowledged":          {agent("checkpointFormat", 4, "checkpointFormatAllowNoRollback", true), "--checkpoint-format=4"},
		"4 from --set":            {agent("checkpointFormat", int64(4), "checkpointFormatAllowNoRollback", true), "--checkpoint-format=4"},
		"4 from a file":           {agent("checkpointFormat", float64(4), "checkpointFormatAllowNoRollback", true), "--checkpoint-format=4"},
		"4 from --set-string":     {agent("checkpointFormat", "4", "checkpointFormatAllowNoRollback", true), "--checkpoint-format=4"},
		"3, acknowledged or not":  {agent("checkpointFormat", 3, "checkpointFormatAllowNoRollback", true), "--checkpoint-format=3"},
		"3 from --set-string too": {agent("checkpointFormat", "3"), "--checkpoint-format=3"},
	} {
		t.Run(name, func(t *testing.T) {
			ds, _ := agentDaemonSet(t, tc.values)
			args := ds.Spec.Template.Spec.Containers[0].Args
			var got []string
			for _, a := range args {
				if strings.HasPrefix(a, "--checkpoint-format") {
					got = append(got, a)
				}
			}
			if !slices.Equal(got, []string{tc.want}) {
				t.Errorf("agent args %q; want one %s", got, tc.want)
			}
		})
	}

	ch, err := LoadChart("../../" + chartDir)
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct {
		values map[string]any
		want   []string
	}{
		"4 unacknowledged": {agent("checkpointFormat", 4), []string{
			"agent.checkpointFormat=4: the agents of release 0.2.0 cannot read a format 4 checkpoint",
			"every agent would refuse its checkpoint and not start",
			"set agent.checkpointFormatAllowNoRollback=true",
			"first set agent.checkpointFormat=3 and wait for the agents' rollout"}},
		"4 acknowledged with the string false": {agent("checkpointFormat", 4, "checkpointFormatAllowNoRollback", "false"), []string{"agent.checkpointFormat=4: the agents of release 0.2.0"}},
		"5":                                    {agent("checkpointFormat", 5, "checkpointFormatAllowNoRollback", true), []string{`agent.checkpointFormat "5": want 3 (read by release 0.2.0) or 4`}},
		"2":                                    {agent("checkpointFormat", 2), []string{`agent.checkpointFormat "2": want 3`}},
		"3.5":                                  {agent("checkpointFormat", 3.5), []string{`agent.checkpointFormat "3.5"`}},
		"text":                                 {agent("checkpointFormat", "v3"), []string{`agent.checkpointFormat "v3"`}},
		"empty":                                {agent("checkpointFormat", ""), []string{`agent.checkpointFormat "": want 3`}},
	} {
		t.Run("refuses "+name, func(t *testing.T) {
			_, err := Render(ch, tc.values)
			for _, w := range tc.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("err %v; want one containing %q", err, w)
				}
			}
		})
	}
}

// The chart's notes, which helm install and upgrade print, warn of format
// 4 and say what a rollback needs first; with format 3 they say nothing
// of it.
func TestNotesWarnOfCheckpointFormat4(t *testing.T) {
	ch, err := LoadChart("../../" + chartDir)
	if err != nil {
		t.Fatal(err)
	}
	notes := func(values map[string]any) string {
		t.Helper()
		vals, err := chartutil.ToRenderValues(ch, values, chartutil.ReleaseOptions{Name: releaseName, Namespace: releaseNamespace, IsInstall: true}, chartutil.DefaultCapabilities)
		if err != nil {
			t.Fatal(err)
		}
		files, err := engine.Engine{Strict: true}.Render(ch, vals)
		if err != nil {
			t.Fatal(err)
		}
		for name, content := range files {
			if strings.HasSuffix(name, "NOTES.txt") {
				return content
			}
		}
		t.Fatal("no NOTES.txt")
		return ""
	}
	if n := notes(nil); strings.Contains(n, "format 4") {
		t.Errorf("the default's notes speak of format 4:\n%s", n)
	}
	n := notes(map[string]any{"agent": map[string]any{"checkpointFormat": 4, "checkpointFormatAllowNoRollback": true}})
	for _, w := range []string{"WARNING: the agents write their checkpoint in format 4", "agent.checkpointFormat=3", "rollout status ds/slingshot-agent"} {
		if !strings.Contains(n, w) {
			t.Errorf("notes lack %q:\n%s", w, n)
		}
	}
}
