package hwcoll

import (
	"errors"
	"slices"
	"testing"
	"time"
)

func TestParseJob(t *testing.T) {
	tests := []struct {
		body, want string
		ok         bool
	}{
		{`{"jobID":"k-1","sessionToken":"abc"}`, "abc", true},
		{`{"sessionToken":""}`, "", false},
		{`{"sessionToken":null}`, "", false},
		{`{"sessionToken":7}`, "", false},
		{`{}`, "", false},
		{`{"sessionToken":"a\nb"}`, "", false},
		{`[`, "", false},
	}
	for _, tt := range tests {
		got, err := ParseJob([]byte(tt.body))
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParseJob(%s) = %q, %v", tt.body, got, err)
		}
		if err != nil && !errors.Is(err, ErrBadAnswer) {
			t.Errorf("ParseJob(%s): %v does not wrap ErrBadAnswer", tt.body, err)
		}
	}
}

func TestParseJobList(t *testing.T) {
	tests := []struct {
		body string
		want []string
		ok   bool
	}{
		{`{"documentLinks":["/fabric/collectives/jobs/a-1","/fabric/collectives/jobs/slurm-7"]}`, []string{"a-1", "slurm-7"}, true},
		{`{"documentLinks":[]}`, []string{}, true},
		{`{"documentLinks":["/elsewhere/x","/fabric/collectives/jobs/","/fabric/collectives/jobs/a/b"]}`, []string{}, true},
		{`{}`, nil, false},
		{`{"documentLinks":"x"}`, nil, false},
		{`nope`, nil, false},
	}
	for _, tt := range tests {
		got, err := ParseJobList([]byte(tt.body))
		if (err == nil) != tt.ok || (tt.ok && !slices.Equal(got, tt.want)) {
			t.Errorf("ParseJobList(%s) = %v, %v", tt.body, got, err)
		}
	}
}

func TestParseToken(t *testing.T) {
	tok, ttl, err := ParseToken([]byte(`{"access_token":"t","expires_in":300}`))
	if err != nil || tok != "t" || ttl != 5*time.Minute {
		t.Fatalf("= %q, %v, %v", tok, ttl, err)
	}
	if _, ttl, _ := ParseToken([]byte(`{"access_token":"t","expires_in":-1}`)); ttl != 0 {
		t.Fatalf("negative expires_in gave %v", ttl)
	}
	for _, b := range []string{`{}`, `{"access_token":""}`, `{"access_token":1}`, `x`} {
		if _, _, err := ParseToken([]byte(b)); !errors.Is(err, ErrBadAnswer) {
			t.Errorf("ParseToken(%s): %v", b, err)
		}
	}
}

func TestParseDetail(t *testing.T) {
	for body, want := range map[string]string{`{"detail":"no"}`: "no", `{"detail":{"a":1}}`: `{"a":1}`, `{}`: "", `x`: ""} {
		if got := ParseDetail([]byte(body)); got != want {
			t.Errorf("ParseDetail(%s) = %q, want %q", body, got, want)
		}
	}
}

// The parsers read what a fabric manager (or whatever answers in its
// place) sends: they must never panic, and what they accept must be
// usable as an environment value and a path segment.
func FuzzParseAnswers(f *testing.F) {
	for _, s := range []string{`{"sessionToken":"abc"}`, `{"documentLinks":["/fabric/collectives/jobs/a"]}`,
		`{"access_token":"t","expires_in":1e300}`, `{"detail":[1,2]}`, `null`, `{"documentLinks":null}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if tok, err := ParseJob(b); err == nil && (tok == "" || !printable(tok)) {
			t.Fatalf("ParseJob accepted %q", tok)
		}
		if ids, err := ParseJobList(b); err == nil {
			for _, id := range ids {
				if id == "" || len(id) > len(b) {
					t.Fatalf("ParseJobList gave %q", id)
				}
			}
		}
		if tok, ttl, err := ParseToken(b); err == nil && (tok == "" || ttl < 0) {
			t.Fatalf("ParseToken gave %q, %v", tok, ttl)
		}
		if d := ParseDetail(b); len(d) > 515 {
			t.Fatalf("ParseDetail gave %d bytes", len(d))
		}
	})
}
