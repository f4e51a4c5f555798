package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"

	"github.com/hamba/avro/v2"
)

// registry speaks the Confluent schema-registry REST API: the latest schema of a subject (to
// write) and schemas by id (to read what any writer wrote).
type registry struct {
	base string
	http *http.Client
	mu   sync.Mutex
	byID map[int]*schema
}

// schema is one registered schema, parsed; each id gets its own cache so two versions of one
// record name never overwrite each other.
type schema struct {
	id     int
	parsed avro.Schema
	name   string
}

func newRegistry(base string) *registry {
	return &registry{base: base, http: &http.Client{}, byID: map[int]*schema{}}
}

func (r *registry) get(ctx context.Context, path string, into any) error {
	request, err := http.NewRequestWithContext(ctx, http.MethodGet, r.base+path, nil)
	if err != nil {
		return err
	}
	response, err := r.http.Do(request)
	if err != nil {
		return fmt.Errorf("schema registry at %s unreachable: %w", r.base, err)
	}
	defer response.Body.Close()
	body, err := io.ReadAll(response.Body)
	if err != nil {
		return err
	}
	if response.StatusCode != http.StatusOK {
		return fmt.Errorf("schema registry %s%s answered %d: %s", r.base, path, response.StatusCode, bytes.TrimSpace(body))
	}
	return json.Unmarshal(body, into)
}

func parse(id int, text string) (*schema, error) {
	parsed, err := avro.ParseWithCache(text, "", &avro.SchemaCache{})
	if err != nil {
		return nil, fmt.Errorf("schema id %d: %w", id, err)
	}
	named, ok := parsed.(avro.NamedSchema)
	if !ok {
		return nil, fmt.Errorf("schema id %d is not a named record", id)
	}
	return &schema{id: id, parsed: parsed, name: named.FullName()}, nil
}

// latest is the newest version registered under subject: producers never register (agentlog
// registers its schemas with `agentlog schemas register`), they write with what is there.
func (r *registry) latest(ctx context.Context, subject string) (*schema, error) {
	var answer struct {
		ID     int    `json:"id"`
		Schema string `json:"schema"`
	}
	if err := r.get(ctx, "/subjects/"+url.PathEscape(subject)+"/versions/latest", &answer); err != nil {
		return nil, err
	}
	return parse(answer.ID, answer.Schema)
}

func (r *registry) byIdentifier(ctx context.Context, id int) (*schema, error) {
	r.mu.Lock()
	found := r.byID[id]
	r.mu.Unlock()
	if found != nil {
		return found, nil
	}
	var answer struct {
		Schema string `json:"schema"`
	}
	if err := r.get(ctx, fmt.Sprintf("/schemas/ids/%d", id), &answer); err != nil {
		return nil, err
	}
	found, err := parse(id, answer.Schema)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.byID[id] = found
	r.mu.Unlock()
	return found, nil
}

// frame is the Confluent wire format: magic byte 0, the schema id (4 bytes, big-endian), the
// Avro binary datum.
func (s *schema) frame(value any) ([]byte, error) {
	datum, err := avro.Marshal(s.parsed, value)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 5, 5+len(datum))
	binary.BigEndian.PutUint32(out[1:5], uint32(s.id))
	return append(out, datum...), nil
}

// decode reads a Confluent-framed value with its writer's schema: the record name and fields.
func (r *registry) decode(ctx context.Context, value []byte) (string, map[string]any, error) {
	if len(value) < 5 || value[0] != 0 {
		return "", nil, fmt.Errorf("not a Confluent-framed record")
	}
	writer, err := r.byIdentifier(ctx, int(binary.BigEndian.Uint32(value[1:5])))
	if err != nil {
		return "", nil, err
	}
	fields := map[string]any{}
	if err := avro.Unmarshal(writer.parsed, value[5:], &fields); err != nil {
		return "", nil, fmt.Errorf("decoding %s: %w", writer.name, err)
	}
	return writer.name, fields, nil
}
