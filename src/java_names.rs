//! Turning JVM internal names (`Ljava/lang/String;`, `(I[J)V`) into the forms people read.

/// `Ljava/lang/String;` → `java.lang.String`; `[I` → `int[]`; a bare `java/lang/String` works too.
pub fn class_name(signature: &str) -> String {
    let (base, dims) = split_array(signature);
    let mut out = match base.as_bytes().first() {
        Some(b'L') if base.ends_with(';') => base[1..base.len() - 1].replace('/', "."),
        _ if base.len() == 1 => primitive_name(base.as_bytes()[0])
            .unwrap_or(base)
            .to_string(),
        _ => base.replace('/', "."),
    };
    for _ in 0..dims {
        out.push_str("[]");
    }
    out
}

fn split_array(sig: &str) -> (&str, usize) {
    let dims = sig.bytes().take_while(|&b| b == b'[').count();
    (&sig[dims..], dims)
}

pub fn primitive_name(code: u8) -> Option<&'static str> {
    Some(match code {
        b'Z' => "boolean",
        b'B' => "byte",
        b'C' => "char",
        b'S' => "short",
        b'I' => "int",
        b'J' => "long",
        b'F' => "float",
        b'D' => "double",
        b'V' => "void",
        _ => return None,
    })
}

/// Split a method descriptor into its parameter and return type descriptors.
/// `(I[Ljava/lang/String;)V` → (["I", "[Ljava/lang/String;"], "V"). `None` if malformed.
pub fn parse_method_descriptor(desc: &str) -> Option<(Vec<&str>, &str)> {
    let rest = desc.strip_prefix('(')?;
    let close = rest.find(')')?;
    let (params, ret) = (&rest[..close], &rest[close + 1..]);
    let mut out = Vec::new();
    let mut at = 0;
    let bytes = params.as_bytes();
    while at < bytes.len() {
        let start = at;
        while at < bytes.len() && bytes[at] == b'[' {
            at += 1;
        }
        match bytes.get(at)? {
            b'L' => at += params[at..].find(';')? + 1,
            c if primitive_name(*c).is_some() => at += 1,
            _ => return None,
        }
        out.push(&params[start..at]);
    }
    if ret.is_empty() {
        return None;
    }
    Some((out, ret))
}

/// `(I[Ljava/lang/String;)V` → `(int, java.lang.String[])`.
pub fn readable_params(desc: &str) -> String {
    match parse_method_descriptor(desc) {
        Some((params, _)) => format!(
            "({})",
            params
                .iter()
                .map(|p| class_name(p))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        None => desc.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(class_name("Ljava/lang/String;"), "java.lang.String");
        assert_eq!(class_name("[[I"), "int[][]");
        assert_eq!(
            class_name("[Ljava/util/Map$Entry;"),
            "java.util.Map$Entry[]"
        );
        assert_eq!(class_name("java/lang/Object"), "java.lang.Object");
        assert_eq!(
            parse_method_descriptor("(IJ[Ljava/lang/String;[[D)V"),
            Some((vec!["I", "J", "[Ljava/lang/String;", "[[D"], "V"))
        );
        assert_eq!(parse_method_descriptor("(Lfoo)V"), None);
        assert_eq!(
            readable_params("(I[Ljava/lang/String;)V"),
            "(int, java.lang.String[])"
        );
    }
}
