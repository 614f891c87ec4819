package hwcoll

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// ParseJob returns the session token of a job object, the answer to a
// GET or POST of it. A token that is missing, empty or not a string is an
// error wrapping ErrBadAnswer: without it the job's processes cannot ask
// for addresses.
func ParseJob(body []byte) (string, error) {
	var job struct {
		SessionToken *string `json:"sessionToken"`
	}
	if err := json.Unmarshal(body, &job); err != nil {
		return "", fmt.Errorf("%w: job object: %w", ErrBadAnswer, err)
	}
	if job.SessionToken == nil || *job.SessionToken == "" {
		return "", fmt.Errorf("%w: job object without a sessionToken", ErrBadAnswer)
	}
	if !printable(*job.SessionToken) {
		// It becomes an environment variable's value.
		return "", fmt.Errorf("%w: sessionToken holds control characters", ErrBadAnswer)
	}
	return *job.SessionToken, nil
}

// ParseJobList returns the job IDs of a listing of the job objects, whose
// "documentLinks" are each JobsPath + "/" + ID. Links elsewhere, and empty
// IDs, are skipped: they name no job object this client could release.
func ParseJobList(body []byte) ([]string, error) {
	var list struct {
		DocumentLinks *[]string `json:"documentLinks"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("%w: job list: %w", ErrBadAnswer, err)
	}
	if list.DocumentLinks == nil {
		// Slurm's client reads a missing list as empty; reading it so
		// here would make a changed answer look like no job at all.
		return nil, fmt.Errorf("%w: job list without documentLinks", ErrBadAnswer)
	}
	ids := make([]string, 0, len(*list.DocumentLinks))
	for _, link := range *list.DocumentLinks {
		id, ok := strings.CutPrefix(link, JobsPath+"/")
		if !ok || id == "" || strings.Contains(id, "/") {
			continue
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// ParseDetail returns an error answer's "detail", or "" when it has none.
func ParseDetail(body []byte) string {
	var e struct {
		Detail any `json:"detail"`
	}
	if json.Unmarshal(body, &e) != nil || e.Detail == nil {
		return ""
	}
	s, ok := e.Detail.(string)
	if !ok {
		b, _ := json.Marshal(e.Detail)
		s = string(b)
	}
	const maxDetail = 512
	if len(s) > maxDetail {
		s = s[:maxDetail] + "..."
	}
	return s
}

// ParseToken returns the access token of an OAuth2 token answer and how
// long it lasts (0 when the answer does not say).
func ParseToken(body []byte) (string, time.Duration, error) {
	var t struct {
		AccessToken *string  `json:"access_token"`
		ExpiresIn   *float64 `json:"expires_in"`
	}
	if err := json.Unmarshal(body, &t); err != nil {
		return "", 0, fmt.Errorf("%w: token answer: %w", ErrBadAnswer, err)
	}
	if t.AccessToken == nil || *t.AccessToken == "" || !printable(*t.AccessToken) {
		return "", 0, fmt.Errorf("%w: token answer without a usable access_token", ErrBadAnswer)
	}
	var ttl time.Duration
	if t.ExpiresIn != nil && *t.ExpiresIn > 0 && *t.ExpiresIn < 1e7 {
		ttl = time.Duration(*t.ExpiresIn * float64(time.Second))
	}
	return *t.AccessToken, ttl, nil
}

// printable reports whether s has no control characters, so that it can
// go into an HTTP header or an environment variable unchanged.
func printable(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}
