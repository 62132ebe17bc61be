//! Columns as kubectl prints them: upper-case headers, each column as wide
//! as its widest cell, three spaces between columns, no padding after the
//! last one. Widths count characters, not bytes (bars and tree lines are
//! multi-byte).

/// A table: headers and rows of cells.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with `headers` (upper-cased when printed).
    pub fn new<S: AsRef<str>>(headers: &[S]) -> Self {
        Self {
            headers: headers.iter().map(|h| h.as_ref().to_uppercase()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row (missing cells print empty, extra cells are dropped).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Whether it has no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The text, one line per row after the headers, each ending in `\n`.
    pub fn render(&self) -> String {
        let n = self.headers.len();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().take(n).enumerate() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
        let mut out = String::new();
        let mut line = |cells: &[String]| {
            let mut text = String::new();
            for (i, width) in widths.iter().enumerate() {
                let cell = cells.get(i).map_or("", String::as_str);
                if i + 1 == n {
                    text.push_str(cell);
                } else {
                    text.push_str(cell);
                    let pad = width - cell.chars().count() + 3;
                    text.extend(std::iter::repeat_n(' ', pad));
                }
            }
            out.push_str(text.trim_end());
            out.push('\n');
        };
        line(&self.headers);
        for row in &self.rows {
            line(row);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_as_wide_as_their_widest_cell_three_spaces_apart() {
        let mut t = Table::new(&["name", "position", "reason"]);
        t.row(vec!["a".into(), "1".into(), "QuotaExceeded".into()]);
        t.row(vec!["longer-name".into(), "12".into(), String::new()]);
        assert_eq!(
            t.render(),
            "NAME          POSITION   REASON\n\
             a             1          QuotaExceeded\n\
             longer-name   12\n"
        );
    }

    #[test]
    fn widths_count_characters_not_bytes() {
        let mut t = Table::new(&["bar", "x"]);
        t.row(vec!["██░░".into(), "1".into()]);
        assert_eq!(t.render(), "BAR    X\n██░░   1\n");
    }
}
