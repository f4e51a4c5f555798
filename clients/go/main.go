// agentlog-submit: submits one agentlog run from Go and waits for its result.
//
// It is the proof that the submission contract (docs/producers.md) needs nothing from agentlog's
// Python code: franz-go produces a Confluent-framed Avro RunSubmitted, keyed by the run id, to the
// commands topic; the run's outcome is read back from the same partition of the events topic.
//
//	agentlog-submit -workflow short -input '{"order": "1"}' [-run-id ID] [-partition N] [-timeout 60s]
//
// The brokers, registry and topics come from flags or the AGENTLOG_* variables agentlog itself
// reads. -partition forces the record onto a partition (what a producer with the wrong
// partitioner does); the worker forwards it to its home partition, and the run completes there.
//
// Output, one JSON object per line: the submission (run id, partition, offset, home partition),
// then the outcome (status, result or reason). Exit status: 0 completed, 2 ended otherwise,
// 3 timed out, 1 any other error.
package main

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// runSubmitted mirrors schemas/RunSubmitted.avsc; fields added later with defaults are filled
// with their defaults by the encoder.
type runSubmitted struct {
	Seq           int64     `avro:"seq"`
	OccurredAt    time.Time `avro:"occurred_at"`
	Worker        string    `avro:"worker"`
	Epoch         int64     `avro:"epoch"`
	Workflow      string    `avro:"workflow"`
	Input         string    `avro:"input"`
	ResetFrom     *string   `avro:"reset_from"`
	ResetPosition int32     `avro:"reset_position"`
	KeyRoot       *string   `avro:"key_root"`
	Seed          *string   `avro:"seed"`
	ContinuedFrom *string   `avro:"continued_from"`
}

const runSubmittedName = "dev.agentlog.commands.RunSubmitted"

type options struct {
	brokers, registry, commands, events string
	workflow, input, runID              string
	partition                           int
	timeout                             time.Duration
}

func env(name, fallback string) string {
	if value := os.Getenv(name); value != "" {
		return value
	}
	return fallback
}

func parseOptions() options {
	var o options
	flag.StringVar(&o.brokers, "brokers", env("AGENTLOG_BOOTSTRAP_SERVERS", "127.0.0.1:9092"), "Kafka bootstrap servers, comma-separated")
	flag.StringVar(&o.registry, "registry", env("AGENTLOG_SCHEMA_REGISTRY_URL", "http://127.0.0.1:8081"), "schema registry URL")
	flag.StringVar(&o.commands, "commands-topic", env("AGENTLOG_COMMANDS_TOPIC", "agentlog.commands"), "commands topic")
	flag.StringVar(&o.events, "events-topic", env("AGENTLOG_EVENTS_TOPIC", "agentlog.events"), "events topic")
	flag.StringVar(&o.workflow, "workflow", "", "workflow name (required)")
	flag.StringVar(&o.input, "input", "{}", "workflow input, JSON")
	flag.StringVar(&o.runID, "run-id", "", "run id (default: a new random one)")
	flag.IntVar(&o.partition, "partition", -1, "force this commands partition (default: the key's murmur2 partition)")
	flag.DurationVar(&o.timeout, "timeout", 60*time.Second, "how long to wait for the run to end")
	flag.Parse()
	return o
}

func newRunID() string {
	raw := make([]byte, 15)
	if _, err := rand.Read(raw); err != nil {
		panic(err)
	}
	return strings.ToLower(base32.StdEncoding.EncodeToString(raw))[:20]
}

func printJSON(value any) {
	line, _ := json.Marshal(value)
	fmt.Println(string(line))
}

func main() {
	o := parseOptions()
	if o.workflow == "" {
		fmt.Fprintln(os.Stderr, "agentlog-submit: -workflow is required")
		os.Exit(1)
	}
	if !json.Valid([]byte(o.input)) {
		fmt.Fprintln(os.Stderr, "agentlog-submit: -input is not valid JSON")
		os.Exit(1)
	}
	if o.runID == "" {
		o.runID = newRunID()
	}
	code, err := run(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "agentlog-submit:", err)
	}
	os.Exit(code)
}

func run(o options) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	registry := newRegistry(o.registry)
	subject := o.commands + "-" + runSubmittedName // TopicRecordNameStrategy
	writer, err := registry.latest(ctx, subject)
	if err != nil {
		return 1, err
	}
	value, err := writer.frame(runSubmitted{
		OccurredAt: time.Now(),
		Worker:     "go-client",
		Epoch:      -1,
		Workflow:   o.workflow,
		Input:      o.input,
	})
	if err != nil {
		return 1, fmt.Errorf("encoding RunSubmitted: %w", err)
	}

	seeds := strings.Split(o.brokers, ",")
	admin, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return 1, err
	}
	ends, err := kadm.NewClient(admin).ListEndOffsets(ctx, o.events)
	admin.Close()
	if err != nil {
		return 1, fmt.Errorf("listing %s: %w", o.events, err)
	}
	partitions := len(ends[o.events])
	if partitions == 0 {
		return 1, fmt.Errorf("topic %s not found on %s", o.events, o.brokers)
	}
	home := homePartition([]byte(o.runID), partitions)
	end, ok := ends.Lookup(o.events, home)
	if !ok || end.Err != nil {
		return 1, fmt.Errorf("no end offset for %s[%d]: %v", o.events, home, end.Err)
	}

	// Idempotent producer, acks from every in-sync replica (franz-go's defaults, stated here).
	// Its default partitioner hashes keys with murmur2 exactly as Kafka's Java client does; a
	// forced partition goes through the manual partitioner instead.
	produceOpts := []kgo.Opt{kgo.SeedBrokers(seeds...), kgo.RequiredAcks(kgo.AllISRAcks())}
	if o.partition >= 0 {
		produceOpts = append(produceOpts, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	}
	producer, err := kgo.NewClient(produceOpts...)
	if err != nil {
		return 1, err
	}
	record := &kgo.Record{Topic: o.commands, Key: []byte(o.runID), Value: value, Partition: int32(o.partition)}
	produced, err := producer.ProduceSync(ctx, record).First()
	producer.Close()
	if err != nil {
		return 1, fmt.Errorf("producing to %s: %w", o.commands, err)
	}
	printJSON(map[string]any{
		"submitted": o.runID, "workflow": o.workflow, "partition": produced.Partition,
		"offset": produced.Offset, "home_partition": home, "schema_id": writer.id,
	})

	outcome, err := waitForEnd(ctx, seeds, registry, o.events, home, end.Offset, o.runID)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			printJSON(map[string]any{"run_id": o.runID, "status": "timeout"})
			return 3, fmt.Errorf("run %s not ended after %s", o.runID, o.timeout)
		}
		return 1, err
	}
	printJSON(outcome)
	if outcome["status"] != "completed" {
		return 2, nil
	}
	return 0, nil
}

// homePartition is where Kafka's Java client (and agentlog) puts a record keyed key.
func homePartition(key []byte, partitions int) int32 {
	return int32((murmur2(key) & 0x7fffffff) % uint32(partitions))
}

// murmur2 is Kafka's Utils.murmur2 (seed 0x9747b28c).
func murmur2(data []byte) uint32 {
	const m = 0x5bd1e995
	length := len(data)
	h := uint32(0x9747b28c) ^ uint32(length)
	whole := length &^ 3
	for i := 0; i < whole; i += 4 {
		k := uint32(data[i]) | uint32(data[i+1])<<8 | uint32(data[i+2])<<16 | uint32(data[i+3])<<24
		k *= m
		k ^= k >> 24
		k *= m
		h *= m
		h ^= k
	}
	switch length % 4 {
	case 3:
		h ^= uint32(data[whole+2]) << 16
		fallthrough
	case 2:
		h ^= uint32(data[whole+1]) << 8
		fallthrough
	case 1:
		h ^= uint32(data[whole])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}
