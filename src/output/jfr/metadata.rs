//! The metadata event's element tree (`MetadataReader.java`, `MetadataDescriptor.java`): a root
//! with a `metadata` element holding one `class` element per type (attributes `name`, `id`,
//! `superType`, `simpleType`; children `field` with `name`, `class` = the field's type id,
//! `constantPool`, `dimension`, and `annotation` with `class` and `value`), and a `region`
//! element (`locale`, `gmtOffset`). Strings are indices into a table that precedes the tree.

use super::{corrupt, put_utf8, put_varint, Cursor, Str};
use crate::error::Result;
use foldhash::{HashMap, HashMapExt};

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Element {
    pub name: String,
    pub attributes: Vec<(String, String)>,
    pub children: Vec<Element>,
}

/// Nesting deeper than this is damage (the JDK's own tree is 5 deep).
const MAX_DEPTH: usize = 32;

impl Element {
    pub fn new(name: &str) -> Self {
        Element {
            name: name.to_string(),
            ..Default::default()
        }
    }

    pub fn attr(mut self, key: &str, value: impl ToString) -> Self {
        self.attributes.push((key.to_string(), value.to_string()));
        self
    }

    pub fn child(mut self, e: Element) -> Self {
        self.children.push(e);
        self
    }

    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    pub fn children_named<'s>(&'s self, name: &'s str) -> impl Iterator<Item = &'s Element> {
        self.children.iter().filter(move |c| c.name == name)
    }

    /// The string table and the tree, as the metadata event's body holds them.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut table: Vec<&str> = Vec::new();
        let mut ids: HashMap<&str, u64> = HashMap::new();
        let mut tree = Vec::new();
        self.encode_tree(&mut tree, &mut table, &mut ids);
        put_varint(out, table.len() as u64);
        for s in &table {
            put_utf8(out, s);
        }
        out.extend_from_slice(&tree);
    }

    fn encode_tree<'s>(
        &'s self,
        out: &mut Vec<u8>,
        table: &mut Vec<&'s str>,
        ids: &mut HashMap<&'s str, u64>,
    ) {
        let mut id = |s: &'s str| {
            *ids.entry(s).or_insert_with(|| {
                table.push(s);
                table.len() as u64 - 1
            })
        };
        put_varint(out, id(&self.name));
        put_varint(out, self.attributes.len() as u64);
        for (k, v) in &self.attributes {
            put_varint(out, id(k));
            put_varint(out, id(v));
        }
        put_varint(out, self.children.len() as u64);
        for c in &self.children {
            c.encode_tree(out, table, ids);
        }
    }

    pub fn decode(c: &mut Cursor) -> Result<Element> {
        let n = c.count()?;
        let mut table = Vec::with_capacity(n);
        for _ in 0..n {
            table.push(match c.string()? {
                Str::Text(s) => s.into_owned(),
                Str::Null => String::new(),
                Str::Pool(_) => return Err(corrupt("a metadata string refers to a constant pool")),
            });
        }
        Self::decode_tree(c, &table, 0)
    }

    fn decode_tree(c: &mut Cursor, table: &[String], depth: usize) -> Result<Element> {
        if depth > MAX_DEPTH {
            return Err(corrupt("metadata nested too deep"));
        }
        let string = |c: &mut Cursor| -> Result<String> {
            let i = c.varint()?;
            table
                .get(i as usize)
                .cloned()
                .ok_or_else(|| corrupt(format!("metadata string {i} out of its table")))
        };
        let mut e = Element::new(&string(c)?);
        for _ in 0..c.count()? {
            let k = string(c)?;
            let v = string(c)?;
            e.attributes.push((k, v));
        }
        for _ in 0..c.count()? {
            e.children.push(Self::decode_tree(c, table, depth + 1)?);
        }
        Ok(e)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    pub name: String,
    pub type_id: u64,
    pub constant_pool: bool,
    pub array: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Type {
    pub name: String,
    pub fields: Vec<Field>,
}

impl Type {
    pub fn field(&self, name: &str) -> Option<usize> {
        self.fields.iter().position(|f| f.name == name)
    }
}

/// The types the tree describes, by id.
pub fn types(root: &Element) -> Result<HashMap<u64, Type>> {
    let metadata = root
        .children_named("metadata")
        .next()
        .ok_or_else(|| corrupt("the metadata has no `metadata` element"))?;
    let number = |e: &Element, key: &str| -> Result<u64> {
        e.attribute(key)
            .and_then(|v| v.parse::<i64>().ok())
            .map(|v| v as u64)
            .ok_or_else(|| {
                corrupt(format!(
                    "a metadata `{}` element has no number `{key}`",
                    e.name
                ))
            })
    };
    let mut out = HashMap::new();
    for class in metadata.children_named("class") {
        let mut fields = Vec::new();
        for f in class.children_named("field") {
            fields.push(Field {
                name: f.attribute("name").unwrap_or_default().to_string(),
                type_id: number(f, "class")?,
                constant_pool: f.attribute("constantPool") == Some("true"),
                array: f.attribute("dimension").is_some_and(|d| d != "0"),
            });
        }
        out.insert(
            number(class, "id")?,
            Type {
                name: class.attribute("name").unwrap_or_default().to_string(),
                fields,
            },
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_reads_back_with_its_types() {
        let root = Element::new("root")
            .child(
                Element::new("metadata")
                    .child(Element::new("class").attr("name", "long").attr("id", 11))
                    .child(
                        Element::new("class")
                            .attr("name", "jdk.types.StackTrace")
                            .attr("id", 26)
                            .child(
                                Element::new("field")
                                    .attr("name", "frames")
                                    .attr("class", 27)
                                    .attr("dimension", 1),
                            )
                            .child(
                                Element::new("field")
                                    .attr("name", "thread")
                                    .attr("class", 22)
                                    .attr("constantPool", true),
                            ),
                    ),
            )
            .child(Element::new("region").attr("locale", "en_US"));
        let mut buf = Vec::new();
        root.encode(&mut buf);
        let back = Element::decode(&mut Cursor::new(&buf, 0)).unwrap();
        assert_eq!(back, root);
        let types = types(&back).unwrap();
        let st = &types[&26];
        assert_eq!(st.name, "jdk.types.StackTrace");
        assert!(st.fields[0].array && !st.fields[0].constant_pool);
        assert!(st.fields[1].constant_pool && !st.fields[1].array);
        assert_eq!(st.field("thread"), Some(1));
        // Cut anywhere, it is an error.
        for n in 0..buf.len() {
            assert!(Element::decode(&mut Cursor::new(&buf[..n], 0)).is_err());
        }
    }
}
