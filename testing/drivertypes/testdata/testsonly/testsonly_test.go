package testsonly
