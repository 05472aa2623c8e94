// cairn from Go through its C API (cgo). Build with the header and the library:
//
//	CGO_CFLAGS=-I../../crates/cairn-capi/include \
//	CGO_LDFLAGS="../../target/release/libcairn.a -lm -ldl -lpthread" go run . /tmp/store
package main

/*
#include <stdlib.h>
#include "cairn.h"
*/
import "C"

import (
	"fmt"
	"os"
	"unsafe"
)

func check(s C.cairn_status) {
	if s != C.CAIRN_OK {
		panic(fmt.Sprintf("%s: %s", C.GoString(C.cairn_status_name(s)), C.GoString(C.cairn_last_error())))
	}
}

func bytes(s string) (*C.uint8_t, C.size_t) {
	return (*C.uint8_t)(unsafe.Pointer(unsafe.StringData(s))), C.size_t(len(s))
}

func main() {
	path := C.CString(os.Args[1])
	defer C.free(unsafe.Pointer(path))
	var db *C.cairn_db
	check(C.cairn_open(path, nil, &db))
	for _, kv := range [][2]string{{"lang:go", "gopher"}, {"lang:java", "duke"}} {
		k, kl := bytes(kv[0])
		v, vl := bytes(kv[1])
		check(C.cairn_put(db, k, kl, v, vl))
	}
	var it *C.cairn_iter
	p, pl := bytes("lang:")
	check(C.cairn_iter_prefix(db, p, pl, false, &it))
	var k, v *C.uint8_t
	var kl, vl C.size_t
	for C.cairn_iter_next(it, &k, &kl, &v, &vl) == C.CAIRN_OK {
		fmt.Printf("%s=%s\n", C.GoBytes(unsafe.Pointer(k), C.int(kl)), C.GoBytes(unsafe.Pointer(v), C.int(vl)))
	}
	C.cairn_iter_free(it)
	check(C.cairn_close(db))
}
