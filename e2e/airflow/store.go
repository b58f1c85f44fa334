package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/airflow-sandbox/airflow-go-worker/testing/s3server"
)

// The examples read and write these (their bundle configs and Go defaults).
const (
	bucket   = "airflow-artifacts"
	inputKey = "incoming/orders.csv"
	// regionsPrefix holds examples/mapped_conversion's *.csv, the objects
	// its list_objects names.
	regionsPrefix = "incoming/regions/"
)

// store is the S3 server the examples' aws_default connection points at.
type store struct {
	srv   *s3server.Server
	input []byte // orders.csv as uploaded
}

// startStore runs versitygw on host, creates the bucket and uploads the
// examples' input.
func startStore(ctx context.Context, o options, w *workdir, host string) (*store, error) {
	input, err := os.ReadFile(filepath.Join(o.repo, "examples", "conversion", "orders.csv"))
	if err != nil {
		return nil, fmt.Errorf("reading the sample input: %w", err)
	}
	srv, err := s3server.LaunchOn(w.s3, host)
	if err != nil {
		return nil, fmt.Errorf("starting versitygw: %w", err)
	}
	s := &store{srv: srv, input: input}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c := srv.Client()
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		s.stop()
		return nil, fmt.Errorf("creating bucket %s: %w", bucket, err)
	}
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(inputKey), Body: bytes.NewReader(input)}); err != nil {
		s.stop()
		return nil, fmt.Errorf("uploading the input: %w", err)
	}
	// mapped_conversion's objects, one per region, under regionsPrefix,
	// beside what its list_objects (kind: list, match: *.csv) must leave
	// out: another file and an export still in flight.
	regions, _ := filepath.Glob(filepath.Join(o.repo, "examples", "mapped_conversion", "*.csv"))
	objects := map[string][]byte{regionsPrefix + "README.txt": []byte("not a csv\n"), regionsPrefix + "east.csv.0123456789ab.partial": []byte("id\n")}
	for _, f := range regions {
		data, err := os.ReadFile(f)
		if err != nil {
			s.stop()
			return nil, fmt.Errorf("reading %s: %w", f, err)
		}
		objects[regionsPrefix+filepath.Base(f)] = data
	}
	for key, data := range objects {
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(data)}); err != nil {
			s.stop()
			return nil, fmt.Errorf("uploading %s: %w", key, err)
		}
	}
	return s, nil
}

// regionURLs are the objects mapped_conversion's list_objects must
// return, sorted: the example's CSVs under regionsPrefix.
func regionURLs(repo string) []string {
	regions, _ := filepath.Glob(filepath.Join(repo, "examples", "mapped_conversion", "*.csv"))
	var out []string
	for _, f := range regions {
		out = append(out, "s3://"+bucket+"/"+regionsPrefix+filepath.Base(f))
	}
	sort.Strings(out)
	return out
}

func (s *store) stop() { s.srv.Stop() }

// connection is aws_default as Airflow reads it from AIRFLOW_CONN_AWS_DEFAULT.
func (s *store) connection() string {
	b, _ := json.Marshal(map[string]any{
		"conn_type": "aws", "login": s.srv.AccessKey, "password": s.srv.SecretKey,
		"extra": map[string]string{"endpoint_url": s.srv.Endpoint, "region_name": s.srv.Region},
	})
	return string(b)
}

// get reads an object whole (the examples' outputs are small).
func (s *store) get(ctx context.Context, key string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := s.srv.Client().GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		return nil, fmt.Errorf("s3://%s/%s: %w", bucket, key, err)
	}
	defer out.Body.Close()
	return io.ReadAll(io.LimitReader(out.Body, 16<<20))
}

// keys lists the objects under a prefix.
func (s *store) keys(ctx context.Context, prefix string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := s.srv.Client().ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(prefix)})
	if err != nil {
		return nil, fmt.Errorf("listing s3://%s/%s: %w", bucket, prefix, err)
	}
	var keys []string
	for _, o := range out.Contents {
		keys = append(keys, aws.ToString(o.Key))
	}
	return keys, nil
}
