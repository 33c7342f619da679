import CLoader
#if canImport(Glibc)
import Glibc
#endif

/// The executable's relocation table (`DT_RELA`), given back once the loader is done with it.
///
/// Why: gold writes one 24-byte entry for each pointer the loader must adjust in a position-
/// independent executable — 1 MB in `fieldhal-plugin`, 3.3 MB in `fieldhal` — and the loader
/// reads it all before `main`. Its pages then stay mapped, and resident, for the life of the
/// process, though nothing reads them again: lazy binding uses `DT_JMPREL`, not this table,
/// and a library loaded later is relocated from its own. Packed relocations (DT_RELR) would
/// make the table small, but the linkers that write them cannot lay out Swift's executables
/// with their read-only-after-relocation segment (docs/decisions.md, "How the kit's
/// executables are linked and started"). The pages are the file's own, never written
/// (they lie in a segment without write permission): dropping them (`MADV_DONTNEED`) unmaps
/// them, and a read, were there one, would map them again from the file.
public enum RelocationTable {
    /// The executable's table as it is mapped: its address and size, both whole pages (the
    /// pages it shares with its neighbours are left alone); nil when the executable has none,
    /// or when it is not where this expects it (in a segment that is never written, with no
    /// relocations of its text).
    public static func mappedPages() -> (address: UInt, size: Int)? {
        var found: (address: UInt, size: Int)?
        withUnsafeMutablePointer(to: &found) { result in
            _ = dl_iterate_phdr({ info, _, context in
                guard let info else { return 1 }
                context!.assumingMemoryBound(to: (address: UInt, size: Int)?.self).pointee = RelocationTable.pages(of: info.pointee)
                return 1  // the first object is the executable: stop there
            }, result)
        }
        return found
    }

    /// Drops the table's pages from this process's mappings; the bytes dropped (0 when there is
    /// nothing to drop, or `madvise` refused).
    @discardableResult
    public static func release() -> Int {
        guard let (address, size) = mappedPages(), let start = UnsafeMutableRawPointer(bitPattern: address) else { return 0 }
        return madvise(start, size, MADV_DONTNEED) == 0 ? size : 0
    }

    private static func pages(of object: fieldhal_phdr_info) -> (address: UInt, size: Int)? {
        guard let headers = object.headers else { return nil }
        let bias = UInt(object.address)
        let segments = UnsafeBufferPointer(start: headers, count: Int(object.count))
        guard let dynamic = segments.first(where: { $0.p_type == UInt32(PT_DYNAMIC) }),
              let entries = UnsafePointer<Elf64_Dyn>(bitPattern: bias + UInt(dynamic.p_vaddr)) else { return nil }
        var table: UInt?, size: Int?
        var index = 0
        while entries[index].d_tag != Elf64_Sxword(DT_NULL) {
            let entry = entries[index]
            switch entry.d_tag {
            case Elf64_Sxword(DT_RELA): table = UInt(entry.d_un.d_ptr)
            case Elf64_Sxword(DT_RELASZ): size = Int(entry.d_un.d_val)
            case Elf64_Sxword(DT_TEXTREL): return nil
            case Elf64_Sxword(DT_FLAGS) where entry.d_un.d_val & UInt64(DF_TEXTREL) != 0: return nil
            default: break
            }
            index += 1
        }
        guard var start = table, let size, size > 0 else { return nil }
        // glibc adjusts the executable's dynamic entries by the load bias where it can write
        // them; an address still below the bias is the file's own.
        if start < bias { start += bias }
        let end = start + UInt(size)
        // The table must lie inside one loaded segment that is never writable.
        let inside = segments.contains { segment in
            guard segment.p_type == UInt32(PT_LOAD), segment.p_flags & UInt32(PF_W) == 0 else { return false }
            let from: UInt = bias + UInt(segment.p_vaddr)
            let to: UInt = from + UInt(segment.p_memsz)
            return from <= start && end <= to
        }
        guard inside else { return nil }
        let page = UInt(sysconf(Int32(_SC_PAGESIZE)))
        let first = (start + page - 1) / page * page, last = end / page * page
        guard last > first else { return nil }
        return (first, Int(last - first))
    }
}
