package unwinder

// SpillNow gives c its second level of rows at once, as spillAfter misses of
// the hot level would.
func SpillNow(c *Cache) {
	if c.spill == nil {
		c.spill = new(spillLevel)
	}
}

// EvictHot empties c's hot level and nothing else: the rows the next unwinds
// need come from the second level (or the objects).
func EvictHot(c *Cache) {
	clear(c.entries[:])
	c.victim = [cacheSets]uint8{}
}
