// cairn from Java through its C API with the foreign function and memory API (Java 22+):
//   java --enable-native-access=ALL-UNNAMED Example.java target/release/libcairn.so /tmp/store
import java.lang.foreign.*;
import java.lang.invoke.MethodHandle;
import static java.lang.foreign.ValueLayout.*;

public class Example {
    public static void main(String[] args) throws Throwable {
        Linker linker = Linker.nativeLinker();
        try (Arena arena = Arena.ofConfined()) {
            SymbolLookup lib = SymbolLookup.libraryLookup(args[0], arena);
            MethodHandle open = linker.downcallHandle(lib.find("cairn_open").orElseThrow(),
                FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, ADDRESS));
            MethodHandle put = linker.downcallHandle(lib.find("cairn_put").orElseThrow(),
                FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, JAVA_LONG, ADDRESS, JAVA_LONG));
            MethodHandle get = linker.downcallHandle(lib.find("cairn_get").orElseThrow(),
                FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, JAVA_LONG, ADDRESS, JAVA_LONG, ADDRESS));
            MethodHandle close = linker.downcallHandle(lib.find("cairn_close").orElseThrow(),
                FunctionDescriptor.of(JAVA_INT, ADDRESS));

            MemorySegment out = arena.allocate(ADDRESS);
            check((int) open.invokeExact(arena.allocateFrom(args[1]), MemorySegment.NULL, out));
            MemorySegment db = out.get(ADDRESS, 0);
            MemorySegment key = arena.allocateFrom("lang:java"), value = arena.allocateFrom("duke");
            check((int) put.invokeExact(db, key, key.byteSize() - 1, value, value.byteSize() - 1));
            MemorySegment buf = arena.allocate(64), len = arena.allocate(JAVA_LONG);
            check((int) get.invokeExact(db, key, key.byteSize() - 1, buf, 64L, len));
            System.out.println("lang:java=" + new String(buf.asSlice(0, len.get(JAVA_LONG, 0)).toArray(JAVA_BYTE)));
            check((int) close.invokeExact(db));
        }
    }

    static void check(int status) {
        if (status != 0) throw new IllegalStateException("cairn status " + status);
    }
}
