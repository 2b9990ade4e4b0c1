package arch

// PACMask returns the mask of the bits that pointer authentication may use in
// a user-space code address when virtual addresses have vaBits bits
// (commonly 48, or 52 with LVA): every bit from vaBits to 63, bit 55 included
// (it selects the user or kernel half and is never part of a user address).
func PACMask(vaBits uint) uint64 {
	if vaBits == 0 || vaBits >= 64 {
		return 0
	}
	return ^uint64(0) << vaBits
}

// StripPAC removes a pointer authentication code from a user-space return
// address. mask is the set of PAC bits (as the kernel reports it in
// NT_ARM_PAC_MASK, or PACMask(vaBits)). On architectures without pointer
// authentication, or with a zero mask, addr is returned unchanged.
func (a Arch) StripPAC(addr, mask uint64) uint64 {
	if a != ARM64 {
		return addr
	}
	return addr &^ mask
}
