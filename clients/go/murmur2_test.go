package main

import "testing"

// Values from runtime/log/port/partitioning.py (Kafka's Utils.murmur2): Go and Python must agree, or
// a Go producer's runs would live in partitions the workers never read them from.
func TestMurmur2MatchesKafka(t *testing.T) {
	cases := map[string]uint32{
		"":                275646681,
		"a":               2731586172,
		"ab":              316155434,
		"abc":             479470107,
		"abcd":            2971317748,
		"order-48211":     2954304323,
		"go-client-run-1": 2521815014,
		"ünï":             3724512787,
	}
	for key, want := range cases {
		if got := murmur2([]byte(key)); got != want {
			t.Errorf("murmur2(%q) = %d, want %d", key, got, want)
		}
	}
}
