package storage

// Hooks for the external tests (package storage_test), which cannot reach
// unexported names.

// NewFileStoreForTest opens the file:// store directly.
func NewFileStoreForTest() (Driver, error) { return fileStore{}, nil }

// InjectStoreForTest makes e use b for the file:// store.
func InjectStoreForTest(e *Export, b Driver) { e.stores[Location{Scheme: "file"}.storeID()] = b }
