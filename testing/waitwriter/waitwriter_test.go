package waitwriter

import "testing"

func TestSeenClosesOnceTheStringSpansWrites(t *testing.T) {
	w := New("ready")
	w.Write([]byte("not yet, rea"))
	select {
	case <-w.Seen():
		t.Fatal("Seen closed before the string was complete")
	default:
	}
	w.Write([]byte("dy!"))
	w.Write([]byte(" ready again")) // a second match must not close twice
	select {
	case <-w.Seen():
	default:
		t.Fatal("Seen not closed after the string was written across two writes")
	}
	if w.String() != "not yet, ready! ready again" {
		t.Fatalf("String() = %q", w.String())
	}
}
