package azurite

import (
	"context"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
)

func TestStartServesChecksKeysAndStops(t *testing.T) {
	s := Start(t)
	if !strings.HasPrefix(s.AccountURL, "http://127.0.0.1:") {
		t.Fatalf("account URL %s is not on 127.0.0.1", s.AccountURL)
	}
	s.CreateContainer(t, "first")
	if got := s.Blobs(t, "first"); len(got) != 0 {
		t.Fatalf("a new container lists %v", got)
	}
	// Another key is refused: the emulator really checks signatures.
	cred, _ := azblob.NewSharedKeyCredential(s.Account, "bm90LXRoZS1rZXk=")
	c, err := azblob.NewClientWithSharedKeyCredential(s.AccountURL, cred, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CreateContainer(context.Background(), "second", nil); err == nil {
		t.Fatal("a wrong account key was accepted")
	}
	s.Stop()
	if err := s.ready(); err == nil {
		t.Fatal("server still answers after Stop")
	}
	s.Stop()
}
